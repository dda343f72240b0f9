package slots

import (
	"slices"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// otherTarget is a Target that is not a File (a File inside), so Write
// takes it through its Writer, as it takes the simulator's slots in memory.
type otherTarget struct {
	File
	opened  int
	commits []string
}

func (o *otherTarget) Open(size int64) (Writer, error) {
	o.opened++
	w, err := o.File.Open(size)
	if err != nil {
		return nil, err
	}
	return &committing{Writer: w, o: o}, nil
}

type committing struct {
	Writer
	o *otherTarget
}

func (c *committing) Commit(sha256 string) error {
	c.o.commits = append(c.o.commits, sha256)
	return c.Writer.Commit(sha256)
}

// Any Target gets the image through its Writer: written, committed only
// once its hash matched, then read back; one that is too small is not
// opened; a chunked install wants a File or a Writer that syncs.
func TestWriteThroughWriter(t *testing.T) {
	img := testImage(900_000, 31)
	srv := serveBytes(t, compressed(t, img, "zstd"))
	tests := []struct {
		name       string
		slotSize   int
		sha        string
		wantCode   ota.Code
		wantOpened int
		wantCommit bool
	}{
		{"written, committed, read back", 1 << 20, sha(img), "", 1, true},
		{"a wrong sha256 is never committed", 1 << 20, sha(img[1:]), ota.CodeHashMismatch, 1, false},
		{"too small a slot is not opened", 800_000, sha(img), ota.CodeSizeMismatch, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slot := makeSlot(t, t.TempDir(), "slot", tt.slotSize)
			target := &otherTarget{File: File(slot)}
			var phases []ota.Phase
			err := write(t.Context(), Job{Payload: ota.Payload{URL: srv.URL, Compression: "zstd", Size: int64(len(img)), SHA256: tt.sha},
				Target: target, Readback: true, Progress: func(p ota.Progress) {
					if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
						phases = append(phases, p.Phase)
					}
				}}, testTuning())
			if ota.CodeOf(err) != tt.wantCode {
				t.Fatalf("Write() = %v, want code %q", err, tt.wantCode)
			}
			if target.opened != tt.wantOpened || (len(target.commits) == 1) != tt.wantCommit {
				t.Fatalf("opened %d times, commits %v", target.opened, target.commits)
			}
			if tt.wantCode != "" {
				return
			}
			if target.commits[0] != tt.sha || !slices.Equal(phases, []ota.Phase{ota.Downloading, ota.Verifying}) {
				t.Fatalf("commits %v, phases %v", target.commits, phases)
			}
			checkSlot(t, slot, img, tt.slotSize)
		})
	}
	t.Run("chunked, a writer that cannot sync", func(t *testing.T) {
		_, s, d, job := rig(t, chunkImage(20, 32))
		job.Target = &otherTarget{File: File(d.target)}
		err := WriteChunked(t.Context(), job)
		if ota.CodeOf(err) != ota.CodeWriteFailed || !strings.Contains(err.Error(), "sync as it goes") {
			t.Fatalf("WriteChunked() = %v, want write_failed", err)
		}
		if n := s.asked.Load(); n != 0 {
			t.Fatalf("%d store requests before the target was refused", n)
		}
	})
	t.Run("chunked, a writer that syncs", func(t *testing.T) {
		img := chunkImage(20, 32)
		_, _, d, job := rig(t, img)
		target := &otherTarget{File: File(d.target)}
		job.Target = syncingTarget{target}
		if err := WriteChunked(t.Context(), job); err != nil {
			t.Fatal(err)
		}
		if len(target.commits) != 1 || target.commits[0] != sha(img) {
			t.Fatalf("commits %v, want one of %s", target.commits, sha(img))
		}
		checkSlot(t, d.target, img, len(img)+50000)
	})
}

// syncingTarget's Writer syncs as it goes (a Syncer).
type syncingTarget struct{ *otherTarget }

func (s syncingTarget) Open(size int64) (Writer, error) {
	w, err := s.otherTarget.Open(size)
	if err != nil {
		return nil, err
	}
	return syncingWriter{w}, nil
}

type syncingWriter struct{ Writer }

func (w syncingWriter) Sync() error { return w.Writer.(*committing).Writer.Commit("") }

// lendingTarget lends the pipeline its buffers (BufferLender) out of one
// region it keeps, and counts the loans.
type lendingTarget struct {
	*otherTarget
	mem             []byte
	lent, givenBack int
	asked           int
}

func (l *lendingTarget) LendBuffers(size int) ([]byte, func(), error) {
	l.lent++
	l.asked = size
	if len(l.mem) < size {
		l.mem = make([]byte, size)
	}
	return l.mem[:size], func() { l.givenBack++ }, nil
}

// A Target that lends buffers has the write use them — an image written
// twice through the same region is right both times — and gets each loan
// back once.
func TestWriteLentBuffers(t *testing.T) {
	img := testImage(900_000, 33)
	srv := serveBytes(t, compressed(t, img, "zstd"))
	slot := makeSlot(t, t.TempDir(), "slot", 1<<20)
	target := &lendingTarget{otherTarget: &otherTarget{File: File(slot)}}
	for i := range 2 {
		err := write(t.Context(), Job{Payload: ota.Payload{URL: srv.URL, Compression: "zstd", Size: int64(len(img)), SHA256: sha(img)},
			Target: target, Readback: true}, testTuning())
		if err != nil {
			t.Fatalf("write %d: %v", i+1, err)
		}
		checkSlot(t, slot, img, 1<<20)
	}
	if target.lent != 2 || target.givenBack != 2 || target.asked == 0 {
		t.Fatalf("lent %d, given back %d (asked %d bytes), want 2 and 2", target.lent, target.givenBack, target.asked)
	}
}
