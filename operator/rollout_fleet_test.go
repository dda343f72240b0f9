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

// fleetRun is an otasim fleet (in this process) on a stock Mosquitto, its
// image server counting downloads per device, and a recorder of every offer
// published to any device's desired topic.
type fleetRun struct {
	broker *mosquittotest.Broker
	fleet  *fleet.Fleet
	plan   string

	mu     sync.Mutex
	gets   map[string]int // image downloads by device
	offers map[string]int // offers seen on each device's desired topic
}

const fleetPlan = `name = "fleet500"
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
	r := &fleetRun{broker: mosquittotest.Start(t, mosquittotest.Options{Quiet: true}), gets: map[string]int{}, offers: map[string]int{}}
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
	env, err := s.Sign(signer.Offer{ID: "rel-fleet", Version: "2.0", Compatible: "otasim", URL: srv.URL + "/img",
		Size: int64(len(img)), SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatalf("offer: %v", err)
	}
	offer := writeEnvelope(t, dir, string(env))
	r.fleet, err = fleet.New(fleet.Options{Broker: r.broker.URL, Devices: n, KeysDir: keys, Group: "fleet",
		FailHealth: failHealth, Spread: 2 * time.Second})
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
	r.plan = testtool.WriteFile(t, filepath.Join(dir, "plan.toml"), fmt.Appendf(nil, fleetPlan, offer, canaries[0], canaries[1]))
	r.recordOffers(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.fleet.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// recordOffers subscribes to every device's desired topic before anything
// is offered.
func (r *fleetRun) recordOffers(t *testing.T) {
	c := mosquittotest.Client(t, r.broker.URL, "offer-recorder")
	mosquittotest.Subscribe(t, c, "ota/devices/+/desired", func(_ paho.Client, m paho.Message) {
		id := strings.TrimSuffix(strings.TrimPrefix(m.Topic(), "ota/devices/"), "/desired")
		if len(m.Payload()) > 0 {
			r.mu.Lock()
			r.offers[id]++
			r.mu.Unlock()
		}
	})
}

func (r *fleetRun) counts() (gets, offers map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.gets), maps.Clone(r.offers)
}

// waitUp waits until every device is idle on slot A in the fleet view.
func (r *fleetRun) waitUp(t *testing.T) {
	ids := make([]string, len(r.fleet.Devices))
	for i, d := range r.fleet.Devices {
		ids[i] = d.ID
	}
	waitFleet(t, fleetStatuses(t, r.broker.URL), "every device up and idle", ids, func(s ota.Status) bool { return s.State == ota.Idle })
}

// controller runs otactl rollout start until ctx ends or the rollout does.
func (r *fleetRun) controller(ctx context.Context) result {
	var stdout, stderr bytes.Buffer
	code := Run(ctx, []string{"rollout", "start", "--broker", r.broker.URL, "--settle", "2s", "--tick", "200ms", r.plan}, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// members are the devices of each wave in the state, among the fleet's.
func (r *fleetRun) members(s rollout.State) [][]string {
	p, err := rollout.LoadPlan(r.plan)
	if err != nil {
		panic(err)
	}
	ids := make([]string, len(r.fleet.Devices))
	for i, d := range r.fleet.Devices {
		ids[i] = d.ID
	}
	out := rollout.WaveMembers(p, s, ids)
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
	state := watchState(t, r.broker.URL, "fleet500")
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
	s := retainedState(t, r.broker.URL, "fleet500")
	if res.code != ota.ExitFailure || s.Phase != rollout.PhaseHalted || s.Wave != 2 {
		t.Fatalf("exit %d, %s in wave %d, want halted in wave 2\n%s\n%s", res.code, s.Phase, s.Wave, res.stdout, res.stderr)
	}
	if got, want := r.members(s), r.members(mid); !slices.EqualFunc(got, want, slices.Equal) || len(got[1]) != 48 {
		t.Fatalf("waves after the restart %v, before %v (want 2 and 48 devices)", got, want)
	}
	offered := slices.Concat(r.members(s)...)
	// The offered devices finish on their own; then count.
	waitFleet(t, fleetStatuses(t, r.broker.URL), "the offered devices' outcomes", offered, func(st ota.Status) bool {
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
	s := retainedState(t, r.broker.URL, "fleet500")
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
