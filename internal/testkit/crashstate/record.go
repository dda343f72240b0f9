package crashstate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/durable"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
)

// storage is one run's storage: files under root (the journal, the chunked
// state, the boot environment) and the slots' bytes in memory. Every write
// reaches trace (nil: none is recorded) at the product's seams. Nothing is
// fsynced for real: what is durable is the model's to decide.
type storage struct {
	root  string
	trace *Trace
	slots map[ota.Slot]*slotBytes
}

func (s *storage) rel(p string) string {
	r, err := filepath.Rel(s.root, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}

// fsys is the durable.FS of the journal and the chunked state.
type fsys struct{ s *storage }

var _ durable.FS = fsys{}

func (f fsys) CreateTemp(dir, pattern string) (durable.File, error) {
	file, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return &recFile{File: file, inode: f.s.trace.create(f.s.rel(file.Name())), trace: f.s.trace}, nil
}

func (f fsys) Rename(oldpath, newpath string) error {
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}
	f.s.trace.add(Op{Kind: OpRename, Name: f.s.rel(oldpath), To: f.s.rel(newpath)})
	return nil
}

func (f fsys) Remove(name string) error {
	if err := os.Remove(name); err != nil {
		return err
	}
	f.s.trace.add(Op{Kind: OpRemove, Name: f.s.rel(name)})
	return nil
}

func (f fsys) SyncDir(dir string) error {
	f.s.trace.add(Op{Kind: OpSyncDir, Dir: f.s.rel(dir)})
	return nil
}

type recFile struct {
	*os.File
	inode int
	pos   int64
	trace *Trace
}

func (f *recFile) Write(b []byte) (int, error) {
	n, err := f.File.Write(b)
	f.trace.write(f.inode, f.pos, b[:n])
	f.pos += int64(n)
	return n, err
}

func (f *recFile) Sync() error {
	f.trace.sync(f.inode)
	return nil
}

// disk is the boot environment's bootctl.Disk.
func (s *storage) disk() bootctl.Disk {
	return bootctl.Disk{
		WriteAt: func(f *os.File, b []byte, off int64) (int, error) {
			n, err := f.WriteAt(b, off)
			s.trace.write(s.trace.inode(s.rel(f.Name())), off, b[:n])
			return n, err
		},
		Sync: func(f *os.File) error {
			s.trace.sync(s.trace.inode(s.rel(f.Name())))
			return nil
		},
	}
}

// slotBytes is a slot's content, shared with the image it came from until
// the first write; gen counts its writes, for the digest cache.
type slotBytes struct {
	mu    sync.Mutex
	b     []byte
	owned bool
	gen   int
	sumG  int
	sum   string
}

func newSlotBytes(b []byte) *slotBytes { return &slotBytes{b: b, sumG: -1} }

// sha256 is the digest of the first n bytes.
func (sb *slotBytes) sha256(n int) string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.sumG != sb.gen {
		s := sha256.Sum256(sb.b[:min(n, len(sb.b))])
		sb.sum, sb.sumG = hex.EncodeToString(s[:]), sb.gen
	}
	return sb.sum
}

func (sb *slotBytes) bytes() []byte {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return append([]byte(nil), sb.b...)
}

// slotTarget is a slot as the slot writer sees it (slots.Target): writes
// land in its bytes and in the trace, Commit is its sync.
type slotTarget struct {
	s    *storage
	slot ota.Slot
}

var (
	_ slots.Target = slotTarget{}
	_ slots.Syncer = (*slotWriter)(nil)
)

func (t slotTarget) Name() string { return "slot " + string(t.slot) }

func (t slotTarget) Capacity() (int64, error) {
	sb := t.s.slots[t.slot]
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return int64(len(sb.b)), nil
}

func (t slotTarget) Open(size int64) (slots.Writer, error) {
	if c, _ := t.Capacity(); size > c {
		return nil, ota.Errorf(ota.CodeSizeMismatch, "slot %s holds %d bytes, the image is %d", t.slot, c, size)
	}
	return &slotWriter{t: t, sb: t.s.slots[t.slot], inode: t.s.trace.inode(slotName(string(t.slot)))}, nil
}

type slotWriter struct {
	t     slotTarget
	sb    *slotBytes
	inode int
}

func (w *slotWriter) WriteAt(b []byte, off int64) (int, error) {
	w.sb.mu.Lock()
	defer w.sb.mu.Unlock()
	if off < 0 || off+int64(len(b)) > int64(len(w.sb.b)) {
		return 0, fmt.Errorf("write %d bytes at %d of %s: past its end", len(b), off, w.t.Name())
	}
	if !w.sb.owned {
		w.sb.b, w.sb.owned = append([]byte(nil), w.sb.b...), true
	}
	copy(w.sb.b[off:], b)
	w.sb.gen++
	w.t.s.trace.write(w.inode, off, b)
	return len(b), nil
}

func (w *slotWriter) ReadAt(b []byte, off int64) (int, error) {
	w.sb.mu.Lock()
	defer w.sb.mu.Unlock()
	if off >= int64(len(w.sb.b)) {
		return 0, io.EOF
	}
	n := copy(b, w.sb.b[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (w *slotWriter) Commit(string) error { return w.Sync() }

// Sync makes what was written durable (a chunked install's checkpoints).
func (w *slotWriter) Sync() error {
	w.t.s.trace.sync(w.inode)
	return nil
}

func (w *slotWriter) Close() error { return nil }
