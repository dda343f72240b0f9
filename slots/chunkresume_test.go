package slots

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

var errPowerCut = errors.New("simulated power cut")

func resumeTuning() chunkTuning {
	ct := chunkTestTuning()
	// More than the lanes hold and have asked for (3 × (64 KiB + 128 KiB)),
	// so that an interruption loses at most one interval.
	ct.checkpointBytes = 1 << 20
	return ct
}

func readCheckpoint(t *testing.T, d *chunkSlots) checkpoint {
	t.Helper()
	var cp checkpoint
	if err := json.Unmarshal(readFile(t, filepath.Join(d.state, chunkDirName, checkpointName)), &cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestChunkedPowerCut: power is lost after the slot was synced for the third
// checkpoint and before its file replaced the second's. The restart resumes
// from the second, finds what was written after it in the target, and
// fetches in all no more than the store and one checkpoint interval.
func TestChunkedPowerCut(t *testing.T) {
	for _, kind := range imageKinds() {
		t.Run(kind.name, func(t *testing.T) {
			img := kind.image(520, 13)
			c, s, d, job := rig(t, img)
			ct := resumeTuning()
			calls, cutAt := 0, 0
			ct.beforeCheckpoint = func(next int) error {
				if calls++; calls == 3 {
					cutAt = next
					return errPowerCut
				}
				return nil
			}
			if err := writeChunked(t.Context(), job, testTuning(), ct); !errors.Is(err, errPowerCut) {
				t.Fatalf("first run: %v, want the power cut", err)
			}
			cp := readCheckpoint(t, d)
			first := s.served.Load()
			t.Logf("cut before the checkpoint at chunk %d; the file says chunk %d; %d of %d store bytes served", cutAt, cp.Next, first, len(c.store))
			if cp.Next == 0 || cp.Next >= cutAt || first < int64(len(c.store))/4 {
				t.Fatalf("checkpoint at chunk %d, cut at %d, %d bytes served: the test does not test a resume", cp.Next, cutAt, first)
			}
			var last ota.Progress
			job.Progress = func(p ota.Progress) { last = p }
			if err := writeChunked(t.Context(), job, testTuning(), resumeTuning()); err != nil {
				t.Fatal(err)
			}
			checkSlot(t, d.target, img, d.slotSize)
			if total, limit := s.served.Load(), int64(len(c.store))+ct.checkpointBytes; total > limit {
				t.Fatalf("served %d store bytes in all, more than the store and one checkpoint interval (%d)", total, limit)
			}
			if last.BytesReused == 0 {
				t.Fatal("nothing written after the checkpoint was taken from the target")
			}
		})
	}
}

// TestChunkedCrashResumes: an install stopped without any cleanup at 10%,
// 50% and 90% of the store resumes each time and succeeds; in all it fetches
// at most the store and one checkpoint interval per interruption.
func TestChunkedCrashResumes(t *testing.T) {
	for _, kind := range imageKinds() {
		t.Run(kind.name, func(t *testing.T) {
			img := kind.image(520, 17)
			c, s, d, job := rig(t, img)
			ct := resumeTuning()
			for _, pct := range []int64{10, 50, 90} {
				stopAt(t, c, s, job, ct, pct)
				t.Logf("stopped at %d%%: checkpoint at chunk %d, %d store bytes served so far", pct, readCheckpoint(t, d).Next, s.served.Load())
			}
			s.setHandler(nil)
			if err := writeChunked(t.Context(), job, testTuning(), ct); err != nil {
				t.Fatal(err)
			}
			checkSlot(t, d.target, img, d.slotSize)
			if total, limit := s.served.Load(), int64(len(c.store))+3*ct.checkpointBytes; total > limit {
				t.Fatalf("served %d store bytes in all, more than the store and three checkpoint intervals (%d)", total, limit)
			}
		})
	}
}

// cutPower runs job until the power is cut before a checkpoint, once the
// checkpoint file says more than chunk after are written.
func cutPower(t *testing.T, d *chunkSlots, job ChunkedJob, after int) {
	t.Helper()
	ct := resumeTuning()
	ct.checkpointBytes = 256 << 10
	ct.beforeCheckpoint = func(int) error {
		if readCheckpoint(t, d).Next > after {
			return errPowerCut
		}
		return nil
	}
	if err := writeChunked(t.Context(), job, testTuning(), ct); !errors.Is(err, errPowerCut) {
		t.Fatalf("first run: %v", err)
	}
}

// TestChunkedCheckpointOfAnother: a checkpoint of another image, or of
// the same image cut by another index, or one that cannot be read, is not
// resumed from: the install starts over.
func TestChunkedCheckpointOfAnother(t *testing.T) {
	img := chunkImage(200, 19)
	// keyed rewrites the checkpoint with the key of the job as other changes it.
	keyed := func(other func(j *ChunkedJob)) func(j *ChunkedJob, d *chunkSlots) {
		return func(j *ChunkedJob, d *chunkSlots) {
			target, err := filepath.EvalSymlinks(d.target)
			if err != nil {
				panic(err)
			}
			o := *j
			other(&o)
			cp := readCheckpoint(t, d)
			cp.Key = o.checkpointKey(target)
			st := chunkState{dir: filepath.Join(d.state, chunkDirName)}
			st.saveCheckpoint(&cp)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(j *ChunkedJob, d *chunkSlots)
	}{
		{"another image", keyed(func(o *ChunkedJob) { o.SHA256 = sha([]byte("another image")) })},
		{"another index", keyed(func(o *ChunkedJob) { o.Expect.IndexSHA256 = sha([]byte("another index")) })},
		{"unreadable", func(_ *ChunkedJob, d *chunkSlots) {
			os.WriteFile(filepath.Join(d.state, chunkDirName, checkpointName), []byte("{garbage"), 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s, d, job := rig(t, img)
			cutPower(t, d, job, 0)
			tc.change(&job, d)
			before := s.served.Load()
			if err := writeChunked(t.Context(), job, testTuning(), resumeTuning()); err != nil {
				t.Fatal(err)
			}
			checkSlot(t, d.target, img, d.slotSize)
			// At least: a request of the first run may still be sending.
			if again := s.served.Load() - before; again < int64(len(s.c.store)) {
				t.Fatalf("served %d store bytes after the restart, want the whole store (%d)", again, len(s.c.store))
			}
		})
	}
}

// TestChunkedResumeDistrustsCheckpoint: a checkpoint planted in the state
// directory that says every chunk is written, or a target changed between
// two runs in a chunk before the checkpoint, never ends in a slot that is
// not the image: with the read-back the install fails (readback_mismatch);
// without it the restart checks the chunks before the checkpoint and fetches
// those the target does not hold.
func TestChunkedResumeDistrustsCheckpoint(t *testing.T) {
	img := chunkImage(120, 23)
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, d *chunkSlots, job ChunkedJob)
	}{
		{"planted checkpoint", func(t *testing.T, d *chunkSlots, job ChunkedJob) {
			target, err := filepath.EvalSymlinks(d.target)
			if err != nil {
				t.Fatal(err)
			}
			st := chunkState{dir: filepath.Join(d.state, chunkDirName)}
			st.init()
			n := int(payload.ChunkCount(job.Size, job.Expect.ChunkSize))
			st.saveCheckpoint(&checkpoint{Key: job.checkpointKey(target), Offer: job.Offer, Next: n, Done: job.Size})
			if st.loadCheckpoint(job.checkpointKey(target)) == nil {
				t.Fatal("checkpoint not planted")
			}
		}},
		{"target changed between runs", func(t *testing.T, d *chunkSlots, job ChunkedJob) {
			cutPower(t, d, job, 10)
			f, err := os.OpenFile(d.target, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("changed"), 2*testChunk+5); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		for _, readback := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/readback %v", tc.name, readback), func(t *testing.T) {
				_, _, d, job := rig(t, img)
				job.Readback = readback
				tc.prepare(t, d, job)
				err := writeChunked(t.Context(), job, testTuning(), resumeTuning())
				if readback {
					wantCode(t, err, ota.CodeReadbackMismatch)
					// The error names the chunk the slot got wrong.
					var e *ota.Error
					if errors.As(err, &e); tc.name == "target changed between runs" && e.Field != "slot.chunk[2]" {
						t.Errorf("field %q, want slot.chunk[2]: %v", e.Field, err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				checkSlot(t, d.target, img, d.slotSize)
			})
		}
	}
}

// stopAt runs the install until the server has sent pct% of the store, and
// stops it there (the server stops answering: the crash comes at that mark).
func stopAt(t *testing.T, c *chunked, s *storeServer, job ChunkedJob, ct chunkTuning, pct int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	at := int64(len(c.store)) * pct / 100
	s.setHandler(func(w http.ResponseWriter, r *http.Request, data []byte) {
		if s.served.Load() >= at {
			cancel()
			<-r.Context().Done()
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	})
	wantCode(t, writeChunked(ctx, job, testTuning(), ct), "cancelled")
}
