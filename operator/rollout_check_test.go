package operator

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
)

// published records every message on the rollouts' and the offers' topics,
// retained ones included: a check must leave nothing there.
func published(t *testing.T, broker string) func() []string {
	var (
		mu   sync.Mutex
		seen []string
	)
	c := mosquittotest.Client(t, broker, "check-watch")
	for _, f := range []string{"ota/rollouts/#", "ota/devices/+/desired", "ota/groups/+/desired"} {
		mosquittotest.Subscribe(t, c, f, func(_ paho.Client, m paho.Message) {
			mu.Lock()
			seen = append(seen, m.Topic())
			mu.Unlock()
		})
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func TestRolloutCheck(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	startProtoFleet(t, b.URL, 40, "rel-x", "00", func(int) bool { return false })
	seen := published(t, b.URL)
	good, _, _ := rolloutPlan(t, "checked", "0s", 5)

	// Three mistakes: all named, exit 2.
	bad := filepath.Join(t.TempDir(), "bad.toml")
	plan := strings.NewReplacer(`name = "checked"`, `name = "checked.v2"`, "percent = 10\n", "percent = 120\n",
		"max_failed_percent = 5", "max_failed_percent = 5\nmax_fail = 3").Replace(mustReadFile(t, good))
	if err := os.WriteFile(bad, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	r := otactl(t, "rollout", "check", "--broker", b.URL, bad)
	if r.code != ota.ExitUsage || !strings.Contains(r.stderr, "3 mistakes") {
		t.Fatalf("exit %d, want %d naming 3 mistakes:\n%s", r.code, ota.ExitUsage, r.stderr)
	}
	for _, want := range []string{"unknown key halt.max_fail", "name: \"checked.v2\"", "wave[2].percent: 120 is not in (0, 100]"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("no %q in:\n%s", want, r.stderr)
		}
	}

	// A good plan, sized from the fleet: 2 canaries, then 10% of 40 (2
	// more), then the other 36.
	r = mustRun(t, "rollout", "check", "--broker", b.URL, "--settle", "1s", good)
	for _, re := range []string{
		`(?m)^plan .*: rollout checked releases \S+ \(version 4\.2\.0, sha256 \w{12}\) to group fleet in 3 waves; plan hash \w{12}$`,
		`(?m)^group fleet on mqtt://\S+: 40 devices \(`,
		`(?m)^  wave 1: 2 devices: gw-001, gw-002$`,
		`(?m)^  wave 2: 2 devices: gw-\d{3}, gw-\d{3}$`,
		`(?m)^  wave 3: 36 devices: (gw-\d{3}, ){5}…$`,
		`(?m)^no rollout checked on the broker yet; nothing was published$`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("no /%s/ in:\n%s", re, r.stdout)
		}
	}
	// Without a broker: the plan alone.
	if r := mustRun(t, "rollout", "check", good); !strings.Contains(r.stdout, "the plan is valid") || strings.Contains(r.stdout, "group fleet on") {
		t.Errorf("without --broker:\n%s", r.stdout)
	}
	time.Sleep(300 * time.Millisecond)
	if s := seen(); len(s) > 0 {
		t.Errorf("rollout check published on %v", s)
	}
}
