package operator

import (
	"encoding/json"
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
	"github.com/otad/otad/rollout"
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

	// Statuses on the topics of IDs the contract forbids, listing the
	// group: in no wave, and named with the rule (docs/contract/mqtt.md, names).
	c := mosquittotest.Client(t, b.URL, "bad-ids")
	for _, id := range []string{"x.y", "gw 1"} {
		st := `{"device":"` + id + `","seq":1,"state":"idle","booted_slot":"A","groups":["fleet"],"slots":{"A":{"version":"1.0","status":"good"}}}`
		if tok := c.Publish("ota/devices/"+id+"/status", 1, true, st); !tok.Wait() || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}

	// A good plan, sized from the fleet: 2 canaries, then 10% of 40 (2
	// more), then the other 36.
	r = mustRun(t, "rollout", "check", "--broker", b.URL, "--settle", "1s", good)
	for _, re := range []string{
		`(?m)^  statuses not taken, in no wave: 2$`,
		`(?m)^    gw 1: status on the topic of device ID "gw 1": not a valid name: .*only A-Z, a-z, 0-9, '_' and '-'$`,
		`(?m)^    x\.y: status on the topic of device ID "x\.y": not a valid name: .*only A-Z, a-z, 0-9, '_' and '-'$`,
		`(?m)^plan .*: rollout checked releases \S+ \(version 4\.2\.0, sha256 \w{12}\) to group fleet in 3 waves; plan hash \w{12}$`,
		`(?m)^group fleet on mqtt://\S+: 40 devices \(`,
		`(?m)^  wave 1: 2 devices: gw-00[12], gw-00[12]$`,
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

func TestRolloutList(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	if r := mustRun(t, "rollout", "list", "--broker", b.URL); !strings.Contains(r.stderr, "no rollout state retained") {
		t.Errorf("no rollouts: %q", r.stderr)
	}
	c := mosquittotest.Client(t, b.URL, "states")
	for name, st := range map[string]rollout.State{
		"fw-a": {Name: "fw-a", Phase: rollout.PhaseHalted, Group: "eu", Offer: rollout.Ref{ID: "rel-a"}, Wave: 1, WaveCount: 3,
			Counts: rollout.Counts{Devices: 4, Pending: 1, Success: 2, Failed: 1}},
		"fw-b": {Name: "fw-b", Phase: rollout.PhaseFinished, Group: "us", Offer: rollout.Ref{ID: "rel-b"}, Wave: 2, WaveCount: 2,
			Counts: rollout.Counts{Devices: 10, Success: 10}},
	} {
		c.Publish("ota/rollouts/"+name+"/state", 1, true, sealState(t, "ota/rollouts/"+name+"/state", st)).Wait()
	}
	c.Publish("ota/rollouts/junk/state", 1, true, "{").Wait()
	r := mustRun(t, "rollout", "list", "--broker", b.URL)
	for _, re := range []string{
		`(?m)^ROLLOUT\s+STATE\s+WAVE\s+GROUP\s+OFFER\s+DEVICES\s+OUTCOMES\s+FAILED\s+PENDING\s+UPDATED$`,
		`(?m)^fw-a\s+halted\s+1/3\s+eu\s+rel-a\s+4\s+3\s+1\s+1\s`,
		`(?m)^fw-b\s+finished\s+2/2\s+us\s+rel-b\s+10\s+10\s+0\s+0\s`,
		`(?m)^junk\s+\(bad state: `,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("no /%s/ in:\n%s", re, r.stdout)
		}
	}
	// Issue 31: --json, the same rollouts as data.
	var list []struct {
		Name  string         `json:"name"`
		State *rollout.State `json:"state"`
		Error string         `json:"error"`
	}
	r = mustRun(t, "rollout", "list", "--json", "--broker", b.URL)
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 3 {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	if l := list[0]; l.Name != "fw-a" || l.State == nil || l.State.Phase != rollout.PhaseHalted || l.State.Counts.Failed != 1 {
		t.Errorf("--json fw-a: %+v", l)
	}
	if l := list[2]; l.Name != "junk" || l.State != nil || l.Error == "" {
		t.Errorf("--json junk: %+v", l)
	}
}
