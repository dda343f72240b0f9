package dashboard

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/browsertest"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
)

// startDashboard runs the dashboard of the fleet on broker on a loopback
// port until the end of the test, and returns its URL.
func startDashboard(t *testing.T, broker string) string {
	t.Helper()
	return startDashboardWith(t, broker, &Access{Listen: "127.0.0.1:0"}, nil)
}

// startDashboardWith is startDashboard with acc (not checked yet) and the
// rollout commands' publisher.
func startDashboardWith(t *testing.T, broker string, acc *Access, command func(context.Context, *mqtt.Session, string, rollout.Op, string) error) string {
	t.Helper()
	if err := acc.Check(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	urls := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Broker: mqtt.Config{Broker: broker}, Access: acc, Window: time.Second, Trust: rollout.Trust{Unsigned: true}, Command: command}, func(u string) { urls <- u })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dashboard: %v", err)
		}
	})
	select {
	case u := <-urls:
		return u
	case err := <-done:
		t.Fatalf("dashboard: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("dashboard did not start")
	}
	return ""
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteString(`\` + string(r))
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Hostile device data, published as devices could: script in a message,
// markup in an ID (a bad status: no device may have that ID,
// docs/contract/mqtt.md) and a version, a 100 KB refusal, statuses that do not
// decode, a rollout state that is no state. The page shows all of it as
// text, shows the bad ones as bad, and keeps working.
func TestPageEscapesHostileStatuses(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	const (
		evilID      = `<img src=x onerror="window.__pwned='id'">`
		evilVersion = `<b onmouseover="window.__pwned='version'">9.9</b>`
		evilMessage = `<script>window.__pwned='message'</script>`
	)
	long := strings.Repeat("<i>A</i>", 100<<10/8)
	statuses := map[string]string{
		"gw-ok": `{"device":"gw-ok","seq":1,"state":"idle","booted_slot":"A","slots":{"A":{"version":"1.0","status":"good"}}}`,
		evilID:  fmt.Sprintf(`{"device":%s,"seq":1,"state":"idle"}`, js(evilID)),
		"gw-evil": fmt.Sprintf(`{"device":"gw-evil","seq":1,"state":"idle","booted_slot":"B","slots":{"A":{"version":"1.0","status":"good"},"B":{"version":%s,"status":"good"}},
			"last_result":{"id":"r1","result":"failed","code":"health_check_failed","message":%s},
			"last_refusal":{"code":"bad_signature","message":%s}}`, js(evilVersion), js(evilMessage), js(long)),
		"gw-garbage": `{"device":"gw-garbage","state":`,
		"gw-liar":    `{"device":"gw-ok","seq":99,"state":"idle"}`,
		"gw-weird":   `{"device":"gw-weird","seq":1,"state":"<u>exploding</u>","booted_slot":"Z","slots":{"Z":{"version":"x"}}}`,
	}
	c := mosquittotest.Client(t, b.URL, "hostile")
	pub := func(topic, payload string) {
		if tok := c.Publish(topic, 1, true, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", topic, tok.Error())
		}
	}
	for id, st := range statuses {
		pub("ota/devices/"+id+"/status", st)
	}
	pub("ota/rollouts/evil/state", `{"name":`+js(evilMessage))
	url := startDashboard(t, b.URL)

	br := browsertest.Start(t, time.Minute)
	br.Run(t, 30*time.Second, "load the page", chromedp.Navigate(url))
	br.WaitFor(t, 20*time.Second, "every device in the table", `document.querySelectorAll("#device-rows tr").length === 6`)
	// An event is not retained (docs/contract/mqtt.md): it comes live, once
	// the view has its device's status (an event of a device the view does
	// not know yet is dropped).
	if tok := c.Publish("ota/devices/gw-evil/events", 1, false, fmt.Sprintf(`{"device":"gw-evil","seq":2,"from":"confirming","to":"idle","result":"failed","message":%s}`, js(evilMessage))); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish the event: %v", tok.Error())
	}
	br.WaitFor(t, 10*time.Second, "the overview", `document.getElementById("total").textContent === "6"`)

	row := func(id string) string {
		return `[...document.querySelectorAll("#device-rows tr")].find(r => r.dataset.device === ` + js(id) + `)`
	}
	for _, tt := range []struct{ what, expr, want string }{
		{"the ID, as text", row(evilID) + `.cells[0].textContent`, evilID},
		{"the ID no device may have", row(evilID) + `.cells[2].textContent`, "bad status"},
		{"the version, as text", row("gw-evil") + `.cells[3].textContent`, evilVersion},
		{"slot B, as text", row("gw-evil") + `.cells[6].textContent`, evilVersion + " (good)"},
		{"its failure", row("gw-evil") + `.cells[8].textContent`, "failed/health_check_failed"},
		{"a status that does not decode", row("gw-garbage") + `.cells[2].textContent`, "bad status"},
		{"a status of another device", row("gw-liar") + `.cells[2].textContent`, "bad status"},
		{"a state no agent has", row("gw-weird") + `.cells[2].textContent`, "<u>exploding</u>"},
		{"the rollout state that is no state", `document.querySelector('.rollout[data-name="evil"] .bad').textContent.startsWith("the retained state does not decode")`, "true"},
		{"the failure chart", `document.querySelector("#chart-failures .chart-label").textContent`, "health_check_failed"},
		{"no trust chart while no device has a root", `String(document.getElementById("chart-trust").parentElement.hidden)`, "true"},
	} {
		if got := fmt.Sprint(browsertest.Eval[any](t, br, tt.expr)); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.what, got, tt.want)
		}
	}

	// The device page: the ID is text.
	browsertest.Eval[string](t, br, `location.hash = "device=" + encodeURIComponent(`+js(evilID)+`)`)
	br.WaitFor(t, 10*time.Second, "the bad ID's page", `document.getElementById("device-id").textContent === `+js(evilID)+` && !document.getElementById("device").hidden`)

	// The 100 KB refusal is cut, the script in the message and the event
	// is text.
	browsertest.Eval[string](t, br, `location.hash = "device=gw-evil"`)
	br.WaitFor(t, 10*time.Second, "the device page", `document.getElementById("device-id").textContent === "gw-evil" && document.getElementById("device-result").textContent !== "-" && document.getElementById("device-events").rows.length === 1 && !document.getElementById("device").hidden`)
	refusal := browsertest.Eval[string](t, br, `document.getElementById("device-refusal").textContent`)
	if !strings.HasPrefix(refusal, "-: bad_signature — <i>A</i>") || len(refusal) > maxText+200 {
		t.Errorf("refusal shown as %d bytes: %.80q", len(refusal), refusal)
	}
	if got := browsertest.Eval[string](t, br, `document.getElementById("device-result").textContent`); got != "r1: failed/health_check_failed — "+evilMessage {
		t.Errorf("last result %q", got)
	}
	if got := browsertest.Eval[string](t, br, `document.querySelector("#device-events td.message").textContent`); got != evilMessage {
		t.Errorf("event message %q", got)
	}
	if got := browsertest.Eval[string](t, br, `document.getElementById("device-id").textContent`); got != "gw-evil" {
		t.Errorf("device heading %q", got)
	}

	// Nothing a device sent became markup or ran.
	injected := browsertest.Eval[float64](t, br, `document.querySelectorAll("main img, main b, main i, main u, main script, head script:not([src])").length`)
	if pwned := browsertest.Eval[any](t, br, `window.__pwned === undefined ? null : window.__pwned`); injected != 0 || pwned != nil {
		t.Errorf("%v injected elements; window.__pwned = %v", injected, pwned)
	}

	// And the page keeps working: a change arrives live.
	browsertest.Eval[string](t, br, `location.hash = ""`)
	pub("ota/devices/gw-ok/status", `{"device":"gw-ok","seq":2,"state":"downloading","booted_slot":"A","slots":{"A":{"version":"1.0","status":"good"}},"target":{"id":"r2","version":"2.0","bytes_done":1,"bytes_total":4}}`)
	br.WaitFor(t, 15*time.Second, "the change, live", row("gw-ok")+`?.cells[2].textContent === "downloading" && `+row("gw-ok")+`.cells[7].textContent === "2.0 25%"`)
	if p := br.Problems(); len(p) > 0 {
		t.Errorf("the page reported problems: %q", p)
	}
}

// The rollout page's buttons, behind the token: pause on a running
// rollout publishes a pause command on its control topic through the
// dashboard's session (as otactl rollout pause does), resume shows on a
// paused one, and a finished one offers none.
func TestRolloutButtons(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	c := mosquittotest.Client(t, b.URL, "states")
	for name, phase := range map[string]string{"run": rollout.PhaseRunning, "held": rollout.PhasePaused, "done": rollout.PhaseFinished} {
		st := rollout.State{Name: name, Phase: phase, Group: "g", WaveCount: 1, Waves: []rollout.WaveState{}}
		if phase == rollout.PhaseFinished {
			st.Finished = &rollout.Mark{}
		}
		raw, _ := st.Encode()
		c.Publish("ota/rollouts/"+name+"/state", 1, true, raw).Wait()
	}
	commands := make(chan rollout.Command, 4)
	mosquittotest.Subscribe(t, c, "ota/rollouts/+/control", func(_ paho.Client, m paho.Message) {
		if cmd, err := rollout.DecodeCommand(m.Payload()); err == nil {
			commands <- cmd
		}
	})
	publish := func(ctx context.Context, sess *mqtt.Session, name string, op rollout.Op, reason string) error {
		raw, _ := rollout.NewCommand(op, reason, "dashboard", time.Now()).Encode()
		return sess.PublishRetained(ctx, raw, "ota/rollouts/"+name+"/control")
	}
	url := startDashboardWith(t, b.URL, &Access{Listen: "127.0.0.1:0", TokenFile: tokenFile(t, testToken)}, publish)

	br := browsertest.Start(t, time.Minute)
	br.Run(t, 30*time.Second, "log in", chromedp.Navigate(url+"?token="+testToken))
	br.WaitFor(t, 20*time.Second, "the rollouts", `document.querySelectorAll(".rollout").length === 3`)
	ops := func(name string) string {
		return fmt.Sprint(browsertest.Eval[any](t, br, `[...document.querySelectorAll('.rollout[data-name="`+name+`"] button.action')].map(b => b.dataset.op).join(",")`))
	}
	for name, want := range map[string]string{"run": "pause,abort", "held": "resume,abort", "done": ""} {
		if got := ops(name); got != want {
			t.Errorf("rollout %s offers %q, want %q", name, got, want)
		}
	}
	browsertest.Eval[any](t, br, `document.querySelector('.rollout[data-name="run"] button[data-op="pause"]').click(), 0`)
	select {
	case cmd := <-commands:
		if cmd.Op != rollout.OpPause || cmd.Reason != "from the dashboard" {
			t.Errorf("published %+v", cmd)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no command published")
	}
	br.WaitFor(t, 10*time.Second, "the note", `(document.querySelector('.rollout[data-name="run"] .action-note')?.textContent || "").startsWith("pause published")`)
	if p := br.Problems(); len(p) > 0 {
		t.Errorf("the page reported problems: %q", p)
	}
}
