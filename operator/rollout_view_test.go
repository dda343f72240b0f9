package operator

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/otad/otad/rollout"
)

// TestLiveTableDoneAfterCancel: the final table is shown even when the
// watch ended by its context (a Ctrl-C, a deadline), which Render checks
// to stop a long table early.
func TestLiveTableDoneAfterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var out bytes.Buffer
	l := newLiveTable(ctx, &out)
	l.done(rollout.State{Name: "fw-4", Phase: "running", Group: "g", WaveCount: 1})
	for _, want := range []string{"rollout fw-4: RUNNING", "WAVE"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("final table after a cancelled watch:\n%s\nwant it to hold %q", out.String(), want)
		}
	}
}
