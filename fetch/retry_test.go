package fetch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/backoff"
	"github.com/otad/otad/ota"
)

// The retrier waits for a network that is gone however many tries it takes
// (the window growing to the cap) until the offer expires, counts the
// server's 5xx, and ends at once on a final error; bytes that arrive start
// the counts again and end the wait shown.
func TestRetrier(t *testing.T) {
	network := &TransientError{Err: errors.New("dial tcp: connection refused")}
	busy := &TransientError{Err: errors.New("HTTP 503"), Status: 503}
	final := ota.Wrap(ota.CodeDownloadFailed, errors.New("HTTP 404"))
	tests := []struct {
		name      string
		until     time.Duration // from now; 0: none
		errs      []error
		progress  int // Progress() after this many failures
		wantSleep []time.Duration
		wantErr   string // "" when the last failure is waited for
	}{
		{"the network is waited for past the attempts, the window capped", 0,
			[]error{network, network, network, network, network, network}, -1,
			[]time.Duration{5, 10, 20, 40, 40, 40}, ""},
		{"5xx is counted", 0, []error{busy, busy, busy}, -1, []time.Duration{5, 10}, "giving up after 3 attempts"},
		{"progress starts the count again", 0, []error{busy, busy, busy, busy}, 2, []time.Duration{5, 10, 5, 10}, ""},
		{"a final error ends at once", 0, []error{network, final}, -1, []time.Duration{5}, "HTTP 404"},
		{"an expired offer stops waiting", -time.Second, []error{network}, -1, nil, "the offer expired at"},
		{"the wait ends with the offer", 30 * time.Millisecond, []error{network, network, network}, -1, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &sleeps{}
			p := backoff.Policy{Attempts: 3, Base: 10 * time.Millisecond, Max: 80 * time.Millisecond, Sleep: rec.sleep, Rand: func() float64 { return 0.5 }}
			var shown []*ota.Waiting
			r := Request{Retry: p, Waiting: func(w *ota.Waiting) { shown = append(shown, w) }}
			if tt.until != 0 {
				r.Until = time.Now().Add(tt.until)
			}
			rt := NewRetrier(r)
			var err error
			for i, e := range tt.errs {
				if i == tt.progress {
					rt.Progress()
				}
				if err = rt.Retry(t.Context(), e); err != nil {
					break
				}
			}
			if (err == nil) != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if tt.name == "the wait ends with the offer" {
				for _, d := range rec.list() {
					if d > 30*time.Millisecond {
						t.Fatalf("waited %v, past the offer's expiry", d)
					}
				}
				return
			}
			want := make([]time.Duration, len(tt.wantSleep))
			for i, d := range tt.wantSleep {
				want[i] = d * time.Millisecond
			}
			if got := rec.list(); !slices.Equal(got, want) {
				t.Fatalf("slept %v, want %v", got, want)
			}
			waits := 0
			for _, w := range shown {
				if w != nil {
					waits++
					if w.For != ota.WaitNetwork || w.Error != network.Error() || w.NextTry.Before(w.Since) {
						t.Fatalf("shown %+v", *w)
					}
				}
			}
			if want := len(tt.wantSleep) > 0 && tt.errs[0] == error(network); want != (waits > 0) {
				t.Fatalf("%d waits shown, want some: %v", waits, want)
			}
		})
	}
	// Bytes that arrive end the wait shown.
	var shown []*ota.Waiting
	rt := NewRetrier(Request{Retry: backoff.Policy{Base: time.Millisecond, Max: time.Millisecond, Sleep: (&sleeps{}).sleep}, Waiting: func(w *ota.Waiting) { shown = append(shown, w) }})
	if err := rt.Retry(context.Background(), network); err != nil {
		t.Fatal(err)
	}
	rt.Progress()
	rt.Progress()
	if len(shown) != 2 || shown[0] == nil || shown[1] != nil {
		t.Fatalf("shown %v, want the wait then its end", fmt.Sprint(shown))
	}
}
