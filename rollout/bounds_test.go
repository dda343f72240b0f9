package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Every count, list and duration of a state read from a broker is checked
// where it is decoded: a refusal names the field and its limit.
func TestDecodeStateBounds(t *testing.T) {
	hist := strings.Repeat(`{"time":"2026-11-29T10:00:00Z","event":"x"},`, maxHistory+1)
	for _, c := range []struct {
		name, state, field string
	}{
		{"a million waves", `{"name":"bomb","wave_count":1000000}`, "wave_count"},
		{"1e8 waves", `{"name":"bomb","wave_count":100000000}`, "wave_count"},
		{"no waves", `{"name":"x","wave_count":0}`, "wave_count"},
		{"more waves than the plan", `{"name":"x","wave_count":1,"waves":[{},{}]}`, "waves"},
		{"wave past the plan", `{"name":"x","wave_count":2,"wave":3}`, "wave"},
		{"a 10-year lease", `{"name":"x","wave_count":1,"lease":{"holder":"h","epoch":9,"ttl_ms":315360000000}}`, "lease.ttl_ms"},
		{"a lease of no time", `{"name":"x","wave_count":1,"lease":{"holder":"h","epoch":9,"ttl_ms":0}}`, "lease.ttl_ms"},
		{"negative count", `{"name":"x","wave_count":1,"counts":{"devices":-1}}`, "counts.devices"},
		{"outcomes over devices", `{"name":"x","wave_count":1,"counts":{"devices":1,"success":1000000}}`, "counts"},
		{"a wave's count", `{"name":"x","wave_count":1,"waves":[{"kind":"percent","counts":{"devices":2,"failed":3}}]}`, "waves[0].counts"},
		{"a wave's queue", `{"name":"x","wave_count":1,"waves":[{"kind":"percent","queued":-5}]}`, "waves[0].queued"},
		{"records", `{"name":"x","wave_count":1,"records":1000000000}`, "records"},
		{"a long history", `{"name":"x","wave_count":1,"history":[` + strings.TrimSuffix(hist, ",") + `]}`, "history"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeState([]byte(c.state))
			var be *BoundsError
			if !errors.As(err, &be) || be.Field != c.field || be.Limit == "" {
				t.Fatalf("err %v, want a bounds error on %s", err, c.field)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Errorf("%q does not name %s", err, c.field)
			}
		})
	}
	// The largest state the contract allows decodes.
	s := State{Name: "x", WaveCount: maxWaves, Wave: maxWaves, Waves: make([]WaveState, maxWaves),
		Lease: &Lease{Holder: "h", Epoch: 1, TTLMS: MaxLeaseTTL.Milliseconds()}, History: make([]Change, maxHistory)}
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeState(b); err != nil {
		t.Errorf("a state at the limits: %v", err)
	}
}

// The 36-byte state that took otactl rollout status to 23.7 GB: refused,
// and what reading and rendering it allocates stays far under 64 MiB.
func TestBombStateCostsLittle(t *testing.T) {
	for _, n := range []int{1_000_000, 100_000_000} {
		raw := fmt.Appendf(nil, `{"name":"bomb","wave_count":%d}`, n)
		alloc := allocated(func() {
			if _, err := DecodeState(raw); err == nil {
				t.Errorf("wave_count %d decoded", n)
			}
			// A state that bypassed the decoder still renders within ctx.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := Render(ctx, io.Discard, State{Name: "bomb", WaveCount: n}, 10, time.Now()); !errors.Is(err, context.Canceled) {
				t.Errorf("render of wave_count %d with its context ended: %v", n, err)
			}
		})
		if alloc > 64<<20 {
			t.Errorf("wave_count %d: %d bytes allocated, want under 64 MiB", n, alloc)
		}
	}
}

// allocated is how many bytes fn allocates on the heap.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A command's ID and words are bounded.
func TestDecodeCommandBounds(t *testing.T) {
	for _, c := range []struct{ cmd, field string }{
		{`{"id":"` + strings.Repeat("a", 65) + `","op":"pause"}`, "id"},
		{`{"id":"a","op":"pause","reason":"` + strings.Repeat("r", 2000) + `"}`, "reason"},
	} {
		var be *BoundsError
		if _, err := DecodeCommand([]byte(c.cmd)); !errors.As(err, &be) || be.Field != c.field {
			t.Errorf("%.40s: %v, want a bounds error on %s", c.cmd, err, c.field)
		}
	}
	if _, err := DecodeCommand([]byte(`{"id":"a1","op":"abort","reason":"broken"}`)); err != nil {
		t.Errorf("a good command: %v", err)
	}
}

// A record's wave is one of the plan's.
func TestDecodeRecordBounds(t *testing.T) {
	for _, w := range []int{0, -1, maxWaves + 1, 1 << 40} {
		var be *BoundsError
		if _, err := DecodeRecord(fmt.Appendf(nil, `{"device":"d1","wave":%d}`, w), "d1"); !errors.As(err, &be) || be.Field != "wave" {
			t.Errorf("wave %d: %v", w, err)
		}
	}
	if _, err := DecodeRecord([]byte(`{"device":"d1","wave":32,"kept":"success"}`), "d1"); err != nil {
		t.Errorf("a good record: %v", err)
	}
}
