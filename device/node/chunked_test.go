package node_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/ota"
)

const chunk = 16 << 10

// withChanged is a copy of img with the given chunks altered.
func withChanged(img []byte, chunks ...int) []byte {
	out := bytes.Clone(img)
	for _, c := range chunks {
		out[c*chunk+123] ^= 0xff
	}
	return out
}

// installAndCommit installs env, lets the sim device reboot and commit, and
// returns the journal's last result.
func installAndCommit(t *testing.T, tb *devicetest.Testbed, env []byte) *ota.Outcome {
	t.Helper()
	in := tb.Start(nil)
	o, err := in.D.Agent.Install(context.Background(), env)
	devicetest.Must(t, err)
	if o.Result != ota.ResultStaged {
		t.Fatalf("outcome %+v", o)
	}
	devicetest.Must(t, in.Wait(t))
	j := tb.Settle("commit", nil)
	if j.LastResult.Result != ota.ResultSuccess {
		t.Fatalf("after the reboot: %+v", j.LastResult)
	}
	return j.LastResult
}

// TestChunkedUpdates: a chunked update from a factory image hashes the
// booted slot and fetches only what differs; the next one knows the booted
// slot from the kept index; both commit and report what they fetched and
// reused.
func TestChunkedUpdates(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	v1 := withChanged(tb.Factory[:devicetest.ImageSize], 3, 70)
	v2 := withChanged(v1, 10, 50, 150)
	for i, step := range []struct {
		name    string
		img     []byte
		changed int
	}{
		// and the short last chunk, which a scan of whole chunks does not find
		{"v1", v1, 3},
		{"v2", v2, 3},
	} {
		before := tb.Fetched.Load()
		env, sum := tb.Offer(step.name, 0, devicetest.OfferOpts{Image: step.img, Chunked: true, ChunkSize: chunk,
			SecVer: uint64(i + 1), Issued: time.Now().UTC().Add(time.Duration(i) * time.Second)})
		r := installAndCommit(t, tb, env)
		served := tb.Fetched.Load() - before
		idx := int64(32 + 36*(len(step.img)/chunk+1))
		t.Logf("%s: served %d bytes, reported %+v", step.name, served, r.Transfer)
		if r.SHA256 != sum || r.BytesFetched != served || served > idx+int64(step.changed)*chunk {
			t.Fatalf("%s: served %d bytes (index %d, %d changed chunks), outcome %+v", step.name, served, idx, step.changed, r)
		}
		if r.BytesReused < int64(len(step.img))*9/10 {
			t.Fatalf("%s: reused %d of %d bytes", step.name, r.BytesReused, len(step.img))
		}
		kept := filepath.Join(tb.Cfg.StateDir, "chunked", sum+".idx")
		if _, err := os.Stat(kept); err != nil {
			t.Fatalf("%s: index not kept: %v", step.name, err)
		}
		tb.CheckBootable(step.name)
	}
}

// TestChunkedTamperedStore: a chunk altered in the store fails the install
// with chunk_mismatch; the boot order never changes.
func TestChunkedTamperedStore(t *testing.T) {
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate"})
	env, _ := tb.Offer("evil", 5, devicetest.OfferOpts{Chunked: true, Tamper: true})
	in := tb.Start(nil)
	o, err := in.D.Agent.Install(context.Background(), env)
	devicetest.Must(t, err)
	in.Stop()
	in.Wait(t)
	if o.Result != ota.ResultFailed || o.Code != ota.CodeChunkMismatch {
		t.Fatalf("outcome %+v, want failed chunk_mismatch", o)
	}
	if b, err := tb.Sim().Boot(); err != nil || b != "A" {
		t.Fatalf("boots %s (%v), want A", b, err)
	}
}
