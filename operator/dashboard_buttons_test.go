package operator

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/browsertest"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/verify"
)

const dashToken = "a-token-of-the-dashboard-0123456789"

// startDashboardCmd runs `otactl dashboard` (as an operator types it: the
// operator key and trust from the config) behind a token until the end of
// the test, and returns its URL.
func startDashboardCmd(t *testing.T, broker string) string {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(dashToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out testtool.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"dashboard", "--broker", broker, "--listen", "127.0.0.1:0", "--token-file", tok}, io.Discard, &out)
	}()
	t.Cleanup(func() { cancel(); <-done })
	re := regexp.MustCompile(`dashboard of the fleet on \S+: (\S+) \(Ctrl-C`)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("otactl dashboard exited %d:\n%s", code, out.String())
		default:
		}
	}
	t.Fatalf("otactl dashboard did not start:\n%s", out.String())
	return ""
}

// The rollout page's pause, resume and abort in a real browser, through
// otactl dashboard's signing path: each click publishes a command signed
// by the operator key (checked on the broker), which the running
// controller applies and `rollout status`, verifying with the trusted
// keys, shows. A request without the token is refused; a dashboard with no
// operator key offers no buttons and refuses the request, saying why.
func TestDashboardButtonsSign(t *testing.T) {
	b, _, _ := scaleFleet(t, 10, func(string) ota.Result { return ota.ResultSuccess })
	const name, control = "buttons", "ota/rollouts/buttons/control"
	commands := make(chan []byte, 8)
	c := mosquittotest.Client(t, b.URL, "commands")
	mosquittotest.Subscribe(t, c, control, func(_ paho.Client, m paho.Message) {
		if len(m.Payload()) > 0 {
			commands <- append([]byte(nil), m.Payload()...)
		}
	})
	log := recordStates(t, b.URL)
	plan := scalePlan(t, name, "[[wave]]\npercent = 50\nsoak = \"10m\"\n[[wave]]\npercent = 100\n", "max_failed_percent = 5\n")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var ctl result
	ctlDone := make(chan struct{})
	go func() {
		defer close(ctlDone)
		ctl = runCtx(ctx, "rollout", "start", "--broker", b.URL, "--settle", "500ms", "--tick", "100ms", plan)
	}()
	defer func() { cancel(); <-ctlDone }()
	waitStates(t, log, name, "the rollout soaking", func(s rollout.State) bool { return s.Phase == rollout.PhaseSoaking })

	url := startDashboardCmd(t, b.URL)
	br := browsertest.Start(t, 2*time.Minute)
	card := `document.querySelector('.rollout[data-name="` + name + `"]')`

	// A dashboard that trusts the operators but holds no operator key.
	cfg := testtool.WriteFile(t, filepath.Join(t.TempDir(), "config.toml"), []byte("[operator]\ntrust = [\""+testOperator.trustDir+"\"]\n"))
	t.Setenv(configEnv, cfg)
	unsigned := startDashboardCmd(t, b.URL)
	br.Run(t, 30*time.Second, "log in to the dashboard without a key", chromedp.Navigate(unsigned+"?token="+dashToken))
	br.WaitFor(t, 20*time.Second, "the running rollout, without buttons", card+`?.dataset.state === "soaking" && document.querySelectorAll("button.action").length === 0`)
	req, _ := http.NewRequest(http.MethodPost, unsigned+"api/rollouts/"+name+"/pause", strings.NewReader(`{}`))
	req.Header.Set("X-Otad-Action", "1")
	req.Header.Set("Authorization", "Bearer "+dashToken)
	if code, body := do(t, req); code != http.StatusForbidden || !strings.Contains(body, "need an operator key to sign them") {
		t.Errorf("a request to a dashboard without an operator key: %d %q", code, body)
	}
	br.Run(t, 30*time.Second, "log in", chromedp.Navigate(url+"?token="+dashToken))
	opID, err := verify.KeyID(testOperator.key.Public())
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		op      rollout.Op
		offered string // the buttons before the click
		phase   string // what the controller then shows
	}{
		{rollout.OpPause, "pause,abort", rollout.PhasePaused},
		{rollout.OpResume, "resume,abort", rollout.PhaseSoaking},
		{rollout.OpAbort, "pause,abort", rollout.PhaseAborted},
	} {
		buttons := card + `?.querySelectorAll("button.action")`
		br.WaitFor(t, 20*time.Second, string(step.op)+" offered", `[...(`+buttons+` || [])].map(b => b.dataset.op).join(",") === "`+step.offered+`"`)
		browsertest.Eval[any](t, br, card+`.querySelector('button[data-op="`+string(step.op)+`"]').click(), 0`)
		var raw []byte
		select {
		case raw = <-commands:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no command on the broker", step.op)
		}
		checkSignedCommand(t, control, raw, opID, step.op)
		waitStates(t, log, name, "the controller applying "+string(step.op), func(s rollout.State) bool { return s.Phase == step.phase })
		r := runCtx(ctx, "rollout", "status", "--broker", b.URL, name)
		if r.code != ota.ExitOK || !strings.Contains(r.stdout, "rollout "+name+": "+strings.ToUpper(step.phase)) {
			t.Fatalf("after %s, rollout status (verifying with the trusted keys) exited %d:\n%s%s", step.op, r.code, r.stdout, r.stderr)
		}
	}
	br.WaitFor(t, 20*time.Second, "no buttons on the aborted rollout", card+`?.dataset.state === "aborted" && `+card+`.querySelectorAll("button.action").length === 0`)
	select {
	case <-ctlDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the controller did not end on the abort")
	}
	if ctl.code != ota.ExitFailure || !strings.Contains(ctl.stderr+ctl.stdout, "from the dashboard") {
		t.Errorf("the controller ended %d:\n%s%s", ctl.code, ctl.stdout, ctl.stderr)
	}

	// Without the token: refused, nothing published.
	req, _ = http.NewRequest(http.MethodPost, url+"api/rollouts/"+name+"/pause", strings.NewReader(`{}`))
	req.Header.Set("X-Otad-Action", "1")
	if code, body := do(t, req); code != http.StatusUnauthorized {
		t.Errorf("a request without the token: %d %q", code, body)
	}
	if p := br.Problems(); len(p) > 0 {
		t.Errorf("the page reported problems: %q", p)
	}

	select {
	case raw := <-commands:
		t.Errorf("a command published without a click: %s", raw)
	default:
	}
}

// checkSignedCommand: raw, read on topic, is op signed by the operator key
// opID, and verifies with the keys the tests trust.
func checkSignedCommand(t *testing.T, topic string, raw []byte, opID string, op rollout.Op) {
	t.Helper()
	var env rollout.Signed
	if err := json.Unmarshal(raw, &env); err != nil || env.Type != rollout.SignedType || len(env.Signatures) != 1 || env.Signatures[0].KeyID != opID {
		t.Fatalf("%s: not signed by the operator key %.16s: %v %s", op, opID, err, raw)
	}
	p, _, err := testOperator.trust.Open("command", topic, raw)
	if err != nil {
		t.Fatalf("%s: does not verify: %v", op, err)
	}
	cmd, err := rollout.DecodeCommand(p)
	if err != nil || cmd.Op != op || cmd.By != "dashboard" {
		t.Fatalf("%s: published %+v %v", op, cmd, err)
	}
	if _, _, err := (rollout.Trust{Keys: verify.NewKeyring()}).Open("command", topic, raw); err == nil {
		t.Fatalf("%s: verifies with no key trusted", op)
	}
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}
