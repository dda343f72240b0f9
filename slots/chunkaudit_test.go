package slots

import (
	"bytes"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/otad/otad/durable"
	"github.com/otad/otad/ota"
)

// fullFS is a state_dir with no space left for the files whose name full
// says: their writes fail with ENOSPC.
type fullFS struct {
	durable.OS
	full func(pattern string) bool
}

func (f fullFS) CreateTemp(dir, pattern string) (durable.File, error) {
	file, err := f.OS.CreateTemp(dir, pattern)
	if err != nil || !f.full(pattern) {
		return file, err
	}
	return noSpace{file}, nil
}

type noSpace struct{ durable.File }

func (noSpace) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// Issue 21: a full state_dir when the checkpoint, the kept index or the
// booted slot's chunk list is written is a warning, never write_failed for
// a good install: they are aids (a resume starts over, the next update
// reuses less).
func TestChunkedStateDirFull(t *testing.T) {
	img := changed(chunkImage(60, 41), 2, 7)
	for _, tc := range []struct {
		name string
		full func(string) bool
		warn string
	}{
		{"checkpoint", func(p string) bool { return strings.Contains(p, checkpointName) }, "checkpoint not written"},
		{"kept index", func(p string) bool { return strings.Contains(p, indexSuffix) }, "index of the image written not written"},
		{"booted slot's chunk list", func(p string) bool { return strings.Contains(p, scanName) }, "chunk list not written"},
		{"every file", func(string) bool { return true }, "not written"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := makeChunked(t, img)
			s := newStoreServer(t, c)
			d := newChunkSlots(t, len(img)+50000, chunkImage(60, 41))
			job := d.job(s, fastRetry(&sleepRecorder{}))
			var logs syncBuffer
			job.Log = slog.New(slog.NewTextHandler(&logs, nil))
			job.StateFS = fullFS{full: tc.full}
			if err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning()); err != nil {
				t.Fatalf("WriteChunked() = %v, want the install to go on; log:\n%s", err, logs.String())
			}
			checkSlot(t, d.target, img, d.slotSize)
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), tc.warn) {
				t.Fatalf("no warning %q; log:\n%s", tc.warn, logs.String())
			}
			if tc.full(indexSuffix) {
				if _, err := os.Stat(filepath.Join(d.state, chunkDirName, sha(img)+indexSuffix)); !os.IsNotExist(err) {
					t.Fatalf("kept index: %v, want none", err)
				}
			}
		})
	}
}

// Issue 21: a store server that serves no ranges, and a booted slot lacking
// 40 of the chunks its kept index lists: what is missing comes in one read
// of the store in order, not from the store's start once per chunk.
func TestChunkedNoRangesBootedLacks(t *testing.T) {
	old := chunkImage(400, 43)
	img := changed(old, 7, 50) // 8 chunks from the network as planned
	c := makeChunked(t, img)
	s := newStoreServer(t, c)
	s.setHandler(func(w http.ResponseWriter, r *http.Request, store []byte) { answer{start: -1}.write(w, r, store) })
	d := newChunkSlots(t, len(img)+50000, changed(old, 3, 10)) // 40 chunks changed since
	kept := makeChunked(t, old)
	if err := os.MkdirAll(filepath.Join(d.state, chunkDirName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.state, chunkDirName, sha(old)+indexSuffix), kept.idx, 0o600); err != nil {
		t.Fatal(err)
	}
	job := d.job(s, fastRetry(&sleepRecorder{}))
	job.BootedImage = sha(old)
	var last ota.Progress
	job.Progress = func(p ota.Progress) { last = p }
	if err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning()); err != nil {
		t.Fatal(err)
	}
	checkSlot(t, d.target, img, d.slotSize)
	store := int64(len(c.store))
	t.Logf("store %d bytes: %d requests, %d bytes sent, %d fetched, %d reused", store, s.asked.Load(), s.served.Load(), last.Transfer.BytesFetched, last.Transfer.BytesReused)
	if got := last.Transfer.BytesFetched; got > store+int64(len(c.idx)) {
		t.Fatalf("%d bytes fetched, more than one read of the %d-byte store", got, store)
	}
	// A range request each lane tried, and the one that read the store: never
	// one per chunk the booted slot lacks.
	if n := s.asked.Load(); n > int64(chunkTestTuning().lanes)+2 {
		t.Fatalf("%d store requests for 40 chunks the booted slot lacks", n)
	}
}

// Issue 21: with slots.readback = false a chunked install still binds
// payload.sha256 (hashed as it is written, what a resume kept read from the
// slot): a manifest whose sha256 the chunks do not make is hash_mismatch,
// and no kept index names it. A slot file's image is hashed from the
// staging buffers as they are written (O_DIRECT or, where it is refused,
// through the page cache), a Writer's from the pieces on their way to it:
// each way binds it.
func TestChunkedNoReadbackBindsSHA256(t *testing.T) {
	img := chunkImage(40, 47)
	for _, c := range []struct {
		name   string
		tun    func(*tuning)
		writer bool
	}{
		{"slot file, O_DIRECT", func(*tuning) {}, false},
		{"slot file, page cache", func(t *tuning) { t.bufferedWrite = true }, false},
		{"a Writer that syncs", func(*tuning) {}, true},
	} {
		tun := testTuning()
		c.tun(&tun)
		t.Run(c.name+": sha256 the chunks do not make", func(t *testing.T) {
			_, _, d, job := rig(t, img)
			if c.writer {
				job.Target = syncingTarget{&otherTarget{File: File(d.target)}}
			}
			other := bytes.Clone(img)
			other[len(other)/2] ^= 1
			job.SHA256 = sha(other)
			err := writeChunked(t.Context(), job, tun, chunkTestTuning())
			wantCode(t, err, ota.CodeHashMismatch)
			if _, err := os.Stat(filepath.Join(d.state, chunkDirName, sha(other)+indexSuffix)); !os.IsNotExist(err) {
				t.Fatalf("kept index of a hash the slot does not hold: %v", err)
			}
		})
		t.Run(c.name+": the right sha256", func(t *testing.T) {
			_, _, d, job := rig(t, img)
			if c.writer {
				job.Target = syncingTarget{&otherTarget{File: File(d.target)}}
			}
			if err := writeChunked(t.Context(), job, tun, chunkTestTuning()); err != nil {
				t.Fatal(err)
			}
			checkSlot(t, d.target, img, d.slotSize)
		})
	}
	t.Run("resumed", func(t *testing.T) {
		// The second run hashes what the first wrote, read from the slot,
		// and what it finds there after the checkpoint.
		_, _, d, job := rig(t, img)
		ct := chunkTestTuning()
		ct.beforeCheckpoint = func(next int) error {
			if next > 10 {
				return errPowerCut
			}
			return nil
		}
		if err := writeChunked(t.Context(), job, testTuning(), ct); err == nil {
			t.Fatal("the first run was not stopped")
		}
		if err := writeChunked(t.Context(), job, testTuning(), chunkTestTuning()); err != nil {
			t.Fatal(err)
		}
		checkSlot(t, d.target, img, d.slotSize)
	})
}
