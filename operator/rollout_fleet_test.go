package operator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/sim/device"
	"github.com/otad/otad/sim/fleet"
)

// fleetRun is an otasim fleet (in this process) on brokers (a stock
// Mosquitto, or the nodes of a cluster), its image server counting
// downloads per device, and a recorder (on each broker) of every offer
// published to any device's desired topic.
type fleetRun struct {
	urls  []string
	name  string
	fleet *fleet.Fleet
	plan  string
	offer string // the plan's envelope file

	mu       sync.Mutex
	gets     map[string]int        // image downloads by device
	offers   []map[string]int      // offers seen on each device's desired topic, by each broker's recorder
	statuses map[string]ota.Status // the latest status each device published
}

const fleetPlan = `name = %q
offer = %q
group = "fleet"
[[wave]]
devices = [%q, %q]
[[wave]]
percent = 10
[[wave]]
percent = 100
[halt]
max_failed_percent = 5
min_outcomes = 10
device_timeout = "2m"
`

func startFleetRun(t *testing.T, n int, failHealth float64) *fleetRun {
	t.Helper()
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	return startFleetOn(t, []string{b.URL}, "fleet500", "sim-", n, failHealth, nil)
}

// startFleetOn starts n devices named prefix… on urls (each device at a
// random one), those of failIDs failing their health check too, and writes
// rollout name's plan.
func startFleetOn(t *testing.T, urls []string, name, prefix string, n int, failHealth float64, failIDs []string) *fleetRun {
	t.Helper()
	r := &fleetRun{urls: urls, name: name, gets: map[string]int{}, statuses: map[string]ota.Status{}}
	s, keys := signer.Trusted(t)
	dir := t.TempDir()
	img := bytes.Repeat([]byte("fleet image "), 6000)
	sum := sha256.Sum256(img)
	// Slow enough that a wave is still installing when the controller is killed.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.gets[req.Header.Get(device.DeviceHeader)]++
		r.mu.Unlock()
		time.Sleep(time.Second)
		w.Write(img)
	}))
	t.Cleanup(srv.Close)
	env, err := s.Sign(signer.Offer{ID: "rel-" + name, Version: "2.0", Compatible: "otasim", URL: srv.URL + "/img",
		Size: int64(len(img)), SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatalf("offer: %v", err)
	}
	offer := writeEnvelope(t, dir, string(env))
	r.offer = offer
	o := fleet.Options{Brokers: urls, Devices: n, KeysDir: keys, Group: "fleet", Prefix: prefix,
		FailHealth: failHealth, FailIDs: failIDs, Spread: 2 * time.Second, Observe: r.observe}
	if len(urls) == 1 {
		o.Broker, o.Brokers = urls[0], nil
	}
	r.fleet, err = fleet.New(o)
	if err != nil {
		t.Fatal(err)
	}
	// The canaries are the first two healthy devices: the rollout must get
	// past them to the 10% wave.
	var canaries []string
	for _, d := range r.fleet.Devices {
		if !slices.Contains(r.fleet.Failing, d.ID) && len(canaries) < 2 {
			canaries = append(canaries, d.ID)
		}
	}
	r.plan = testtool.WriteFile(t, filepath.Join(dir, "plan.toml"), fmt.Appendf(nil, fleetPlan, name, offer, canaries[0], canaries[1]))
	r.recordOffers(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.fleet.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func (r *fleetRun) observe(st ota.Status) {
	r.mu.Lock()
	r.statuses[st.Device] = st
	r.mu.Unlock()
}

// recordOffers subscribes to every device's desired topic, on each broker,
// before anything is offered (a node lost takes its recorder with it).
func (r *fleetRun) recordOffers(t *testing.T) {
	for i, u := range r.urls {
		seen := map[string]int{}
		r.offers = append(r.offers, seen)
		c := mosquittotest.Client(t, u, fmt.Sprintf("offer-recorder-%s-%d", r.name, i))
		mosquittotest.Subscribe(t, c, "ota/devices/+/desired", func(_ paho.Client, m paho.Message) {
			id := strings.TrimSuffix(strings.TrimPrefix(m.Topic(), "ota/devices/"), "/desired")
			if len(m.Payload()) > 0 && !m.Retained() {
				r.mu.Lock()
				seen[id]++
				r.mu.Unlock()
			}
		})
	}
}

// counts are the downloads by device, and the offers each device was
// sent, as the recorder that saw the most of them counted.
func (r *fleetRun) counts() (gets, offers map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	offers = map[string]int{}
	for _, seen := range r.offers {
		for id, n := range seen {
			offers[id] = max(offers[id], n)
		}
	}
	return maps.Clone(r.gets), offers
}

// waitDevices waits until every one of ids has published a status ok
// accepts (the fleet's own statuses, seen in this process: no broker's
// retained delivery in the way).
func (r *fleetRun) waitDevices(t *testing.T, what string, ids []string, ok func(ota.Status) bool) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var waiting []string
		r.mu.Lock()
		for _, id := range ids {
			if st, found := r.statuses[id]; !found || !ok(st) {
				waiting = append(waiting, id)
			}
		}
		r.mu.Unlock()
		if len(waiting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still waiting for %d devices: %v", what, len(waiting), waiting[:min(10, len(waiting))])
		}
	}
}

// ids are the fleet's devices.
func (r *fleetRun) ids() []string {
	ids := make([]string, len(r.fleet.Devices))
	for i, d := range r.fleet.Devices {
		ids[i] = d.ID
	}
	return ids
}

// waitUp waits until every device is idle.
func (r *fleetRun) waitUp(t *testing.T) {
	r.waitDevices(t, "every device up and idle", r.ids(), func(s ota.Status) bool { return s.State == ota.Idle })
}

// controller runs otactl rollout start until ctx ends or the rollout does.
func (r *fleetRun) controller(ctx context.Context, extra ...string) result {
	var stdout, stderr bytes.Buffer
	args := []string{"rollout", "start", "--settle", "2s", "--tick", "200ms"}
	for _, u := range r.urls {
		args = append(args, "--broker", u)
	}
	code := Run(ctx, append(append(args, extra...), r.plan), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// members are the devices of each wave in the state, among the fleet's.
func (r *fleetRun) members(s rollout.State) [][]string {
	p, err := rollout.LoadPlan(r.plan)
	if err != nil {
		panic(err)
	}
	out := rollout.WaveMembers(p, s, r.ids())
	for _, w := range out {
		slices.Sort(w)
	}
	return out
}

// otasim fleet --devices 500 --fail-health 20 against a 2-device canary
// wave, a 10% wave and a 100% wave, max_failed_percent 5: the rollout halts
// in the 10% wave; no device outside the offered waves ever receives the
// offer; the controller, killed mid-wave and started again, comes to the
// same end; every offered device downloads once.
func TestRolloutHaltsOnASimulatedFleet(t *testing.T) {
	r := startFleetRun(t, 500, 20)
	r.waitUp(t)
	state := watchState(t, r.urls[0], "fleet500")
	ctx, kill := context.WithCancel(context.Background())
	first := make(chan result, 1)
	go func() { first <- r.controller(ctx) }()
	mid := state.wait(t, "wave 2 running", func(s rollout.State) bool {
		return s.Wave == 2 && s.Phase == rollout.PhaseRunning && !s.Waves[1].Offered.IsZero()
	})
	if mid.Counts.Pending == 0 {
		t.Fatalf("wave 2 had no device installing when the controller was killed: %+v", mid.Counts)
	}
	kill() // mid-wave 2, its devices installing
	<-first
	res := r.controller(context.Background())
	s := retainedState(t, r.urls[0], "fleet500")
	if res.code != ota.ExitFailure || s.Phase != rollout.PhaseHalted || s.Wave != 2 {
		t.Fatalf("exit %d, %s in wave %d, want halted in wave 2\n%s\n%s", res.code, s.Phase, s.Wave, res.stdout, res.stderr)
	}
	if got, want := r.members(s), r.members(mid); !slices.EqualFunc(got, want, slices.Equal) || len(got[1]) != 48 {
		t.Fatalf("waves after the restart %v, before %v (want 2 and 48 devices)", got, want)
	}
	offered := slices.Concat(r.members(s)...)
	// The offered devices finish on their own; then count.
	waitFleet(t, fleetStatuses(t, r.urls[0]), "the offered devices' outcomes", offered, func(st ota.Status) bool {
		return rollout.OutcomeOf(st, s.Offer).Ended() && st.State == ota.Idle
	})
	gets, offers := r.counts()
	for d := range offers {
		if !slices.Contains(offered, d) {
			t.Errorf("%s of no offered wave received the offer", d)
		}
	}
	for _, d := range offered {
		if gets[d] != 1 || offers[d] == 0 {
			t.Errorf("%s: %d downloads, %d offers seen", d, gets[d], offers[d])
		}
	}
	if len(gets) != len(offered) {
		t.Errorf("%d devices downloaded, %d were offered", len(gets), len(offered))
	}
}

// The same with --fail-health 0: the rollout finishes, every device ends on
// the new image, exactly one download each.
func TestRolloutFinishesOnASimulatedFleet(t *testing.T) {
	r := startFleetRun(t, 500, 0)
	r.waitUp(t)
	res := r.controller(context.Background())
	s := retainedState(t, r.urls[0], "fleet500")
	if res.code != ota.ExitOK || s.Phase != rollout.PhaseFinished || s.Counts.Success != 500 {
		t.Fatalf("exit %d, %s %+v\n%s", res.code, s.Phase, s.Counts, res.stderr)
	}
	gets, _ := r.counts()
	for _, d := range r.fleet.Devices {
		if _, sha, ok := d.Memory.Slots[ota.SlotB].Image(); !ok || sha != s.Offer.SHA256 || gets[d.ID] != 1 {
			t.Errorf("%s: slot B holds %q, %d downloads", d.ID, sha, gets[d.ID])
		}
	}
}
