package operator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/sim/device"
	"github.com/otad/otad/verify"
)

const resignPlan = `name = %q
offer = %q
group = "fleet"
[[wave]]
devices = ["gw-01", "gw-02"]
[halt]
max_failed_percent = 0
device_timeout = "2m"
`

// Issue 27: rollout fw-2_0 fails on a 404; after `rollout abort --withdraw`
// and the server fixed, the same image signed again (a new issued_at; the
// operator keeps the id, a display name) in rollout fw-2_0b installs. The
// devices' last result names the first offer's failure with the same id and
// image: only the manifest's digest tells the offers apart, and the second
// rollout must not halt on the first one's failure. Real agents on a real
// Mosquitto.
func TestRolloutOfAnImageSignedAgainAfterAFailure(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	dir := t.TempDir()
	img := filepath.Join(dir, "rootfs.img")
	image := makeImage(t, img, 64<<10)
	var broken atomic.Bool
	broken.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if broken.Load() {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, "rootfs.img", time.Time{}, strings.NewReader(string(image)))
	}))
	t.Cleanup(srv.Close)
	mustRun(t, "keygen", filepath.Join(dir, "release"))
	pub, err := os.ReadFile(filepath.Join(dir, "release.pub"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	signAt := func(name string, issued time.Time) (string, string) {
		r := mustRun(t, "sign", "--key", filepath.Join(dir, "release.key"), "--image", img, "--version", "2.0.0",
			"--compatible", "resign-test", "--url", srv.URL+"/rootfs.img", "--id", "fw-2.0", "--issued-at", issued.Format(time.RFC3339Nano))
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(r.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		return p, verify.EnvelopeDigest([]byte(strings.TrimSpace(r.stdout)))
	}
	first, firstDigest := signAt("first.json", now.Add(-2*time.Minute))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	ids := []string{"gw-01", "gw-02"}
	for _, id := range ids {
		d, err := device.New(device.Spec{
			ID: id, Dir: filepath.Join(dir, id), Compatible: "resign-test", SlotSize: 1 << 20, TrustedKey: pub,
			Broker: b.URL, Groups: []string{"fleet"},
			Download:      config.Download{Schemes: []string{"http"}, Retries: 1, Backoff: config.Duration{Duration: 50 * time.Millisecond}, MaxBackoff: config.Duration{Duration: 100 * time.Millisecond}},
			HealthCommand: func(device.Paths) []string { return []string{"/bin/true"} }, CommitWindow: 2 * time.Second,
		}, "test")
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { d.Run(ctx) })
	}
	fv := fleetStatuses(t, b.URL)
	waitFleet(t, fv, "every device up and idle", ids, func(s ota.Status) bool { return s.State == ota.Idle })

	plan := func(name, env string) string {
		p := filepath.Join(dir, name+".toml")
		if err := os.WriteFile(p, []byte(fmt.Sprintf(resignPlan, name, env)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	r := otactl(t, "rollout", "start", "--broker", b.URL, "--settle", "1s", "--tick", "200ms", plan("fw-2_0", first))
	if s := retainedState(t, b.URL, "fw-2_0"); r.code != ota.ExitFailure || s.Phase != rollout.PhaseHalted {
		t.Fatalf("fw-2_0: exit %d, %s, want halted on the 404\n%s\n%s", r.code, s.Phase, r.stdout, r.stderr)
	}
	waitFleet(t, fv, "the first offer's failure in every status", ids, func(s ota.Status) bool {
		return s.State == ota.Idle && s.LastResult != nil && s.LastResult.Result == ota.ResultFailed && s.LastResult.ManifestSHA256 == firstDigest
	})
	mustRun(t, "rollout", "abort", "--withdraw", "--broker", b.URL, "--window", "500ms", "fw-2_0")

	broken.Store(false)
	again, againDigest := signAt("again.json", now.Add(-time.Minute))
	if againDigest == firstDigest {
		t.Fatal("the two signatures have one manifest")
	}
	r = otactl(t, "rollout", "start", "--broker", b.URL, "--settle", "1s", "--tick", "200ms", plan("fw-2_0b", again))
	s := retainedState(t, b.URL, "fw-2_0b")
	// A device may have got the image before fw-2_0b reached it: its
	// download_failed was retryable, and the agent retries that by itself
	// once the server answers (docs/contract/installing.md); fw-2_0b then
	// finds it up to date. Either way nothing failed and nothing halted.
	if c := s.Counts; r.code != ota.ExitOK || s.Phase != rollout.PhaseFinished || c.Success+c.UpToDate != 2 || c.Bad() != 0 {
		t.Fatalf("fw-2_0b: exit %d, %s %+v, want finished with 2 successes or up to date (not halted on fw-2_0's failure)\n%s\n%s",
			r.code, s.Phase, s.Counts, r.stdout, r.stderr)
	}
	waitFleet(t, fv, "every device on the new image", ids, func(s ota.Status) bool {
		r := s.LastResult
		return s.BootedSlot == ota.SlotB && r != nil && (r.Result == ota.ResultSuccess || r.Result == ota.ResultUpToDate) && s.Slots[ota.SlotB].Status == ota.SlotGood
	})
}
