package operator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/otad/otad/internal/testkit/browsertest"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/operator/dashboard"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/sim/device"
	"github.com/otad/otad/sim/fleet"
)

// dashFleet is a simulated fleet of real agents in group "demo" on a stock
// Mosquitto, one of its canaries unhealthy, a plan releasing a signed
// image to it, and the dashboard of it all.
type dashFleet struct {
	broker *mosquittotest.Broker
	fleet  *fleet.Fleet
	plan   string
	url    string
}

const dashPlan = `name = "dash"
offer = %q
group = "demo"
[[wave]]
devices = ["sim-00001", "sim-00002", "sim-00003"]
[[wave]]
percent = 100
[halt]
max_failed_percent = 0
device_timeout = "2m"
`

// startDashFleet starts it; a device in slow waits that long for its
// download.
func startDashFleet(t *testing.T, n int, slow map[string]time.Duration) *dashFleet {
	t.Helper()
	d := &dashFleet{broker: mosquittotest.Start(t, mosquittotest.Options{Quiet: true})}
	s, keys := signer.Trusted(t)
	img := bytes.Repeat([]byte("dashboard image "), 4096)
	sum := sha256.Sum256(img)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(slow[r.Header.Get(device.DeviceHeader)])
		w.Write(img)
	}))
	t.Cleanup(srv.Close)
	env, err := s.Sign(signer.Offer{ID: "rel-dash", Version: "2.0", Compatible: "otasim", URL: srv.URL + "/img",
		Size: int64(len(img)), SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	offer := writeEnvelope(t, dir, string(env))
	d.plan = testtool.WriteFile(t, filepath.Join(dir, "plan.toml"), fmt.Appendf(nil, dashPlan, offer))
	d.fleet, err = fleet.New(fleet.Options{Broker: d.broker.URL, Devices: n, KeysDir: keys, Group: "demo",
		FailIDs: []string{"sim-00002"}, Commit: 2 * time.Second, Spread: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.fleet.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	acc := &dashboard.Access{Listen: "127.0.0.1:0"}
	if err := acc.Check(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	dashDone := make(chan error, 1)
	go func() {
		dashDone <- dashboard.Run(ctx, dashboard.Options{Broker: mqtt.Config{Broker: d.broker.URL}, Access: acc, Window: time.Second, Trust: testOperator.trust},
			func(u string) { urls <- u })
	}()
	t.Cleanup(func() { cancel(); <-dashDone })
	select {
	case d.url = <-urls:
	case err := <-dashDone:
		t.Fatalf("dashboard: %v", err)
	}
	return d
}

// The dashboard in a real browser against a simulated fleet of 30 agents
// and a rollout whose canary wave halts: the page shows the counts, the
// failed device with its code and the wave's progress, as rendered by its
// script; a screenshot is kept (docs/operating.md shows one).
func TestDashboardShowsAFleetAndARollout(t *testing.T) {
	if testing.Short() {
		t.Skip("30 agents and a browser")
	}
	d := startDashFleet(t, 30, nil)
	br := browsertest.Start(t, time.Minute)
	br.Run(t, 30*time.Second, "load the dashboard", chromedp.Navigate(d.url))
	br.WaitFor(t, 60*time.Second, "30 devices, idle", `document.getElementById("total").textContent === "30" &&
		[...document.querySelectorAll("#chart-states .chart-row")].some(r => r.dataset.key === "idle" && r.querySelector(".chart-count").textContent === "30")`)

	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan result, 1)
	go func() {
		var stdout, stderr bytes.Buffer
		code := Run(ctx, []string{"rollout", "start", "--broker", d.broker.URL, "--settle", "2s", "--tick", "200ms", d.plan}, &stdout, &stderr)
		res <- result{code, stdout.String(), stderr.String()}
	}()
	defer func() { cancel(); <-res }()

	card := `document.querySelector('.rollout[data-name="dash"]')`
	br.WaitFor(t, 90*time.Second, "the canary wave halts the rollout", card+`?.dataset.state === "halted"`)
	br.WaitFor(t, 30*time.Second, "the failed canary with its code",
		card+`.querySelector('tr.failed-device[data-device="sim-00002"]')?.cells[2].textContent === "health_check_failed"`)
	br.WaitFor(t, 60*time.Second, "wave 1 complete", card+`.querySelector('.wave[data-wave="1"]').dataset.done === "100"`)
	for _, tt := range []struct{ what, expr, want string }{
		{"the halt reason", card + `.querySelector(".reason").textContent.includes("above max_failed_percent 0")`, "true"},
		{"wave 1's counts", card + `.querySelector('.wave[data-wave="1"] .wave-counts').textContent`, "3 devices: 2 success, 1 failed — ended"},
		{"wave 2, never started", card + `.querySelector('.wave[data-wave="2"] .wave-counts').textContent`, "not started"},
		{"the failures chart", `document.querySelector("#chart-failures .chart-row").dataset.key`, "health_check_failed"},
		{"the version chart", `[...document.querySelectorAll("#chart-versions .chart-row")].map(r => r.dataset.key + "=" + r.querySelector(".chart-count").textContent).join(" ")`, "=28 2.0=2"},
	} {
		if got := fmt.Sprint(browsertest.Eval[any](t, br, tt.expr)); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.what, got, tt.want)
		}
	}
	// The table, filtered by the server: the failed device's row.
	br.Run(t, 10*time.Second, "filter on the failure", chromedp.Click(`#chart-failures .chart-row`))
	br.WaitFor(t, 10*time.Second, "one row", `document.querySelectorAll("#device-rows tr").length === 1`)
	row := browsertest.Eval[string](t, br, `[...document.querySelector("#device-rows tr").cells].map(c => c.textContent).join(" | ")`)
	if !strings.HasPrefix(row, "sim-00002 | yes | idle | - | A |") || !strings.Contains(row, "2.0 (bad)") || !strings.HasSuffix(row, "failed/health_check_failed | -") { // then its root of trust: none
		t.Errorf("the failed device's row: %q", row)
	}
	if p := br.Problems(); len(p) > 0 {
		t.Errorf("the page reported problems: %q", p)
	}
	br.Run(t, 10*time.Second, "clear the filter", chromedp.Click(`#chips .chip`))
	br.WaitFor(t, 10*time.Second, "the whole table", `document.querySelectorAll("#device-rows tr").length === 30`)
	browsertest.Eval[any](t, br, `window.scrollTo(0, 0)`)
	br.Screenshot(t, t.ArtifactDir(), "dashboard.png")
}

// otactl dashboard refuses an address that is not loopback without TLS and
// a token (exit 2), and a bad listen address, before connecting anywhere.
func TestDashboardCommandRefuses(t *testing.T) {
	for _, c := range []exitCase{
		{"everywhere, plain", []string{"dashboard", "--broker", "mqtt://127.0.0.1:1", "--listen", "0.0.0.0:8080"}, ota.ExitUsage, "needs --tls-cert, --tls-key and --token-file"},
		{"no port", []string{"dashboard", "--broker", "mqtt://127.0.0.1:1", "--listen", "127.0.0.1"}, ota.ExitUsage, "want host:port"},
		{"no broker", []string{"dashboard"}, ota.ExitUsage, "missing --broker"},
		{"broker down", []string{"dashboard", "--broker", "mqtt://127.0.0.1:1", "--listen", "127.0.0.1:0"}, ota.ExitFailure, "connect to mqtt://127.0.0.1:1"},
	} {
		t.Run(c.name, func(t *testing.T) { expectExit(t, c) })
	}
}

// fleetUp waits until every device is idle in the fleet view and returns
// their IDs.
func (d *dashFleet) fleetUp(t *testing.T) []string {
	t.Helper()
	ids := make([]string, len(d.fleet.Devices))
	for i, dev := range d.fleet.Devices {
		ids[i] = dev.ID
	}
	waitFleet(t, fleetStatuses(t, d.broker.URL), "every device up and idle", ids, func(s ota.Status) bool { return s.State == ota.Idle })
	return ids
}

// runCtx runs otactl under ctx.
func runCtx(ctx context.Context, args ...string) result {
	var stdout, stderr bytes.Buffer
	code := Run(ctx, args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}
