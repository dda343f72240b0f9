package fleet_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/sim/device"
	"github.com/otad/otad/sim/fleet"
)

// imageServer serves one image and counts the downloads of each device.
type imageServer struct {
	*httptest.Server
	mu   sync.Mutex
	gets map[string]int
}

func serveImage(t *testing.T, img []byte) *imageServer {
	s := &imageServer{gets: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.gets[r.Header.Get(device.DeviceHeader)]++
		s.mu.Unlock()
		w.Write(img)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *imageServer) downloads() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.gets)
}

// A group offer to a small fleet: the healthy devices end on slot B with
// the image in it, the failing ones back on A; each downloads once.
func TestFleetTakesAGroupOffer(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	s, keys := signer.Trusted(t)
	img := make([]byte, 300_000)
	for i := range img {
		img[i] = byte(i * 7)
	}
	sum := sha256.Sum256(img)
	srv := serveImage(t, img)
	f, err := fleet.New(fleet.Options{Broker: b.URL, Devices: 40, KeysDir: keys, Group: "g",
		FailHealth: 10, FailIDs: []string{"sim-00003"}, MaxInstalls: 8, Spread: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(f.Failing, "sim-00003") || len(f.Failing) < 2 {
		t.Fatalf("failing %v", f.Failing)
	}
	ctx, view := run(t, f, b.URL)
	wait(t, view, 40, "idle on A", func(st ota.Status) bool { return st.State == ota.Idle && st.BootedSlot == ota.SlotA })

	env, err := s.Sign(signer.Offer{ID: "rel-2", Version: "2", Compatible: "otasim", URL: srv.URL + "/img", Size: int64(len(img)), SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatal(err)
	}
	if err := mqtt.PublishRetained(ctx, mqtt.Config{Broker: b.URL}, "ota/groups/g/desired", env); err != nil {
		t.Fatal(err)
	}
	wait(t, view, 40, "an outcome", func(st ota.Status) bool {
		return st.State == ota.Idle && st.LastResult != nil && st.LastResult.ID == "rel-2" && st.Slots[st.BootedSlot].Status == ota.SlotGood
	})
	gets := srv.downloads()
	for _, d := range f.Devices {
		st, _ := view.Status(d.ID)
		_, sha, ok := d.Memory.Slots[ota.SlotB].Image()
		failing := slices.Contains(f.Failing, d.ID)
		switch {
		case failing && (st.BootedSlot != ota.SlotA || st.LastResult.Result != ota.ResultFailed || st.LastResult.Code != ota.CodeHealthCheckFailed):
			t.Errorf("%s (failing health) booted %s, %+v", d.ID, st.BootedSlot, st.LastResult)
		case !failing && (st.BootedSlot != ota.SlotB || st.LastResult.Result != ota.ResultSuccess || !ok || sha != hex.EncodeToString(sum[:])):
			t.Errorf("%s booted %s, %+v, slot B holds %s", d.ID, st.BootedSlot, st.LastResult, sha)
		}
		if gets[d.ID] != 1 {
			t.Errorf("%s downloaded %d times", d.ID, gets[d.ID])
		}
	}
	if len(gets) != 40 {
		t.Errorf("downloads by %d devices: %v", len(gets), gets)
	}
}

// run runs f until the test ends, and returns the fleet's context and a view
// of its devices from their topics on broker.
func run(t *testing.T, f *fleet.Fleet, broker string) (context.Context, *fleetview.View) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	view := fleetview.New("")
	go view.Watch(ctx, mqtt.Config{Broker: broker}, nil)
	return ctx, view
}

func wait(t *testing.T, v *fleetview.View, n int, what string, ok func(ota.Status) bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); v.Count(ok) < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d after 60s: %s", what, v.Count(ok), n, v.Tally())
		}
	}
}

func TestFailsHealthIsStable(t *testing.T) {
	n := 0
	for i := 1; i <= 10000; i++ {
		id := fleet.ID("sim-", i)
		if fleet.FailsHealth(id, 20) {
			n++
			if !fleet.FailsHealth(id, 20.5) {
				t.Fatalf("%s fails at 20%% but not 20.5%%", id)
			}
		}
		if fleet.FailsHealth(id, 0) || !fleet.FailsHealth(id, 100) {
			t.Fatalf("%s at 0%% or 100%%", id)
		}
	}
	if n < 1900 || n > 2100 {
		t.Fatalf("%d of 10000 fail at 20%%", n)
	}
}
