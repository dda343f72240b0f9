package node_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/ota"
)

// TestBeforeWriteRunsAsTheWriteStarts: node.Options.BeforeWrite (otad drops
// its start-up pages there) is called as a slot write starts, after the
// offer's checks and before a byte is fetched, then once more when the first
// answer arrives (the connection's set-up done with) and once at the first
// image bytes done when progress reports some (a small image that fails its
// final check may end first): two or three times a write; a refused offer
// writes nothing and calls nothing.
func TestBeforeWriteRunsAsTheWriteStarts(t *testing.T) {
	tests := []struct {
		name      string
		opts      devicetest.OfferOpts
		wantCalls int64
		want      ota.Result
	}{
		{"good offer", devicetest.OfferOpts{}, 3, ota.ResultStaged},
		{"tampered image: written, then refused", devicetest.OfferOpts{Tamper: true}, 3, ota.ResultFailed},
		{"another device type: refused before any write", devicetest.OfferOpts{Compat: "otad,another-board"}, 0, ota.ResultRejected},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := devicetest.New(t, devicetest.Options{Policy: "manual"})
			var calls, fetchedAtCall atomic.Int64
			fetchedAtCall.Store(-1)
			tb.BeforeWrite = func() {
				calls.Add(1)
				fetchedAtCall.CompareAndSwap(-1, tb.Fetched.Load())
			}
			env, _ := tb.Offer("v2", uint64(2+i), tt.opts)
			in := tb.Start(nil)
			o, err := in.D.Agent.Install(context.Background(), env)
			devicetest.Must(t, err)
			in.Stop()
			in.Wait(t)
			if o.Result != tt.want {
				t.Fatalf("outcome %+v, want %s", o, tt.want)
			}
			if n := calls.Load(); n > tt.wantCalls || n < min(tt.wantCalls, 2) {
				t.Errorf("BeforeWrite called %d times, want 2 to %d", n, tt.wantCalls)
			}
			if tt.wantCalls > 0 && fetchedAtCall.Load() != 0 {
				t.Errorf("BeforeWrite called with %d bytes already fetched, want 0", fetchedAtCall.Load())
			}
		})
	}
}
