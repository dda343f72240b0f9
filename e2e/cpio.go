package e2e

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Archive is an in-memory description of a cpio "newc" archive, the format the
// kernel unpacks as an initramfs. Writing it directly (rather than with cpio(1)
// over a staged directory) lets it hold /dev/console without root, and makes
// the archive byte-for-byte reproducible.
type Archive struct {
	entries map[string]entry
}

type entry struct {
	mode       uint32 // type and permission bits, as in stat(2)
	data       []byte // file contents or symlink target
	rmaj, rmin uint32 // device numbers of character devices
}

const (
	modeDir     = 0o040000
	modeFile    = 0o100000
	modeSymlink = 0o120000
	modeChar    = 0o020000
	modeType    = 0o170000
)

// NewArchive returns an empty archive.
func NewArchive() *Archive { return &Archive{entries: map[string]entry{}} }

// clean turns "/bin/sh" into "bin/sh", the form the kernel expects.
func clean(name string) string { return strings.TrimPrefix(path.Clean("/"+name), "/") }

// Dir adds a directory (and its parents).
func (a *Archive) Dir(name string) {
	name = clean(name)
	for name != "." && name != "" {
		if _, ok := a.entries[name]; !ok {
			a.entries[name] = entry{mode: modeDir | 0o755}
		}
		name = path.Dir(name)
	}
}

// File adds a regular file with the permission bits perm.
func (a *Archive) File(name string, data []byte, perm fs.FileMode) {
	name = clean(name)
	a.Dir(path.Dir(name))
	a.entries[name] = entry{mode: modeFile | uint32(perm.Perm()), data: data}
}

// Symlink adds name pointing at target.
func (a *Archive) Symlink(name, target string) {
	name = clean(name)
	a.Dir(path.Dir(name))
	a.entries[name] = entry{mode: modeSymlink | 0o777, data: []byte(target)}
}

// CharDev adds a character device node.
func (a *Archive) CharDev(name string, major, minor uint32) {
	name = clean(name)
	a.Dir(path.Dir(name))
	a.entries[name] = entry{mode: modeChar | 0o600, rmaj: major, rmin: minor}
}

// Names lists the entries in the order WriteTo writes them (parents first).
func (a *Archive) Names() []string {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// WriteTo writes the archive in newc format with its trailer.
func (a *Archive) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: bufio.NewWriterSize(w, 1<<20)}
	ino := uint32(1)
	for _, name := range a.Names() {
		e := a.entries[name]
		nlink := uint32(1)
		if e.mode&modeType == modeDir {
			nlink = 2
		}
		if err := writeRecord(cw, ino, e, nlink, name); err != nil {
			return cw.n, fmt.Errorf("cpio %s: %w", name, err)
		}
		ino++
	}
	if err := writeRecord(cw, 0, entry{}, 1, "TRAILER!!!"); err != nil {
		return cw.n, fmt.Errorf("cpio trailer: %w", err)
	}
	return cw.n, cw.w.(*bufio.Writer).Flush()
}

func writeRecord(w *countWriter, ino uint32, e entry, nlink uint32, name string) error {
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, e.mode, 0, 0, nlink, 0, len(e.data), 0, 0, e.rmaj, e.rmin, len(name)+1, 0)
	if _, err := io.WriteString(w, hdr+name+"\x00"); err != nil {
		return err
	}
	if err := w.pad(); err != nil {
		return err
	}
	if _, err := w.Write(e.data); err != nil {
		return err
	}
	return w.pad()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// pad aligns the stream to 4 bytes, as newc requires after names and data.
func (c *countWriter) pad() error {
	if r := c.n % 4; r != 0 {
		_, err := c.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
