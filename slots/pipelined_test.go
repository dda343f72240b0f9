package slots

import (
	"sync/atomic"
	"testing"

	"github.com/otad/otad/ota"
)

// pipelineHook records Job.Pipelined's calls, and whether it was on while
// image bytes were written.
type pipelineHook struct {
	on, begun, ended atomic.Int32
	onWhileWriting   atomic.Bool
}

func (h *pipelineHook) pipelined() func() {
	h.begun.Add(1)
	h.on.Add(1)
	return func() { h.on.Add(-1); h.ended.Add(1) }
}

func (h *pipelineHook) progress(p ota.Progress) {
	if p.Phase == ota.Downloading && p.BytesDone > 0 && h.on.Load() == 1 {
		h.onWhileWriting.Store(true)
	}
}

// TestPipelined: Job.Pipelined is on, once, for the whole write of a
// compressed stream install, and never called for a raw stream or a chunked
// install (docs/design.md, "Writing a slot").
func TestPipelined(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, h *pipelineHook)
		want  bool
	}{
		{"stream, zstd", stream(ota.CompressionZstd), true},
		{"stream, xz", stream(ota.CompressionXZ), true},
		{"stream, raw", stream(ota.CompressionNone), false},
		{"chunked", func(t *testing.T, h *pipelineHook) {
			img := chunkImage(200, 5)
			_, _, d, job := rig(t, img)
			job.Pipelined, job.Progress = h.pipelined, h.progress
			if err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning()); err != nil {
				t.Fatal(err)
			}
			checkSlot(t, d.target, img, d.slotSize)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h pipelineHook
			tc.write(t, &h)
			begun, ended := h.begun.Load(), h.ended.Load()
			if tc.want && (begun != 1 || ended != 1 || !h.onWhileWriting.Load()) {
				t.Fatalf("Pipelined begun %d times, ended %d, on while writing: %v; want once, for the whole write", begun, ended, h.onWhileWriting.Load())
			}
			if !tc.want && begun != 0 {
				t.Fatalf("Pipelined begun %d times for an install that keeps one P", begun)
			}
		})
	}
}

// stream writes a stream payload compressed with c.
func stream(c ota.Compression) func(t *testing.T, h *pipelineHook) {
	return func(t *testing.T, h *pipelineHook) {
		img := testImage(3<<20+17, 4)
		srv := serveBytes(t, compressed(t, img, c))
		slot := makeSlot(t, t.TempDir(), "slot", len(img)+1<<20)
		err := Write(t.Context(), Job{Payload: ota.Payload{URL: srv.URL, Compression: c, Size: int64(len(img)), SHA256: sha(img)},
			Target: File(slot), Pipelined: h.pipelined, Progress: h.progress})
		if err != nil {
			t.Fatal(err)
		}
		checkSlot(t, slot, img, len(img)+1<<20)
	}
}
