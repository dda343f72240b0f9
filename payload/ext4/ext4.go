// Package ext4 reads, at signing, where an ext4 image keeps each regular file's
// bytes: its path and the image ranges of its extents. It is read-only and
// defensive: every offset is checked against the image, every count bounded, and
// what it does not know (block-mapped files, inline data, encrypted names) is left
// out rather than guessed, so a file map is a hint for deltas and never the truth:
// every chunk a delta makes is checked by its SHA-256 (docs/contract/chunked.md).
package ext4

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Bounds on what one image may make the reader do.
const (
	maxFiles     = 1 << 20
	maxExtents   = 1 << 22
	maxDepth     = 64 // directories
	maxTreeDepth = 5  // extent tree levels, as the kernel allows
	maxDirBytes  = 64 << 20

	superOff     = 1024
	superMagic   = 0xEF53
	extentMagic  = 0xF30A
	incompat64   = 0x80
	flagExtents  = 0x80000
	flagInline   = 0x10000000
	flagEncrypt  = 0x800
	modeMask     = 0xF000
	modeDir      = 0x4000
	modeRegular  = 0x8000
	rootInode    = 2
	uninitMarker = 32768
)

// ErrNotExt4 is returned for an image without an ext4 superblock.
var ErrNotExt4 = errors.New("not an ext4 image")

// Extent is Len bytes of a file from its byte Logical, at byte Physical of the image.
type Extent struct{ Logical, Physical, Len int64 }

// File is a regular file: its path from the root ("/etc/passwd"), its size and
// its initialized extents in logical order (holes and unwritten extents read as
// zeros and are not listed).
type File struct {
	Path    string
	Size    int64
	Extents []Extent
}

type fs struct {
	r          io.ReaderAt
	size       int64
	bs         int64
	inodeSize  int64
	ipg        int64
	inodes     int64
	tables     []int64 // inode table block of each group
	files      []File
	extents    int
	seen       map[uint32]bool // directories read: no cycles
	incompat64 bool
}

// Read lists the regular files of the ext4 image r (size bytes), in path order.
func Read(r io.ReaderAt, size int64) ([]File, error) {
	f := &fs{r: r, size: size, seen: map[uint32]bool{}}
	if err := f.super(); err != nil {
		return nil, err
	}
	if err := f.walk(rootInode, "", 0); err != nil {
		return nil, err
	}
	slices.SortFunc(f.files, func(a, b File) int {
		switch {
		case a.Path < b.Path:
			return -1
		case a.Path > b.Path:
			return 1
		}
		return 0
	})
	return f.files, nil
}

func (f *fs) read(b []byte, off int64) error {
	if off < 0 || off > f.size-int64(len(b)) {
		return fmt.Errorf("ext4: %d bytes at %d, past the image's %d", len(b), off, f.size)
	}
	if _, err := f.r.ReadAt(b, off); err != nil {
		return fmt.Errorf("ext4: read at %d: %w", off, err)
	}
	return nil
}

func (f *fs) super() error {
	sb := make([]byte, 1024)
	if f.size < superOff+1024 {
		return ErrNotExt4
	}
	if err := f.read(sb, superOff); err != nil {
		return err
	}
	le := binary.LittleEndian
	if le.Uint16(sb[0x38:]) != superMagic {
		return ErrNotExt4
	}
	logBS := le.Uint32(sb[0x18:])
	if logBS > 6 {
		return fmt.Errorf("ext4: block size 1024<<%d", logBS)
	}
	f.bs = 1024 << logBS
	f.inodes = int64(le.Uint32(sb[0x0:]))
	f.ipg = int64(le.Uint32(sb[0x28:]))
	f.inodeSize = 128
	if le.Uint32(sb[0x4C:]) >= 1 {
		f.inodeSize = int64(le.Uint16(sb[0x58:]))
	}
	f.incompat64 = le.Uint32(sb[0x60:])&incompat64 != 0
	descSize := int64(32)
	if f.incompat64 {
		descSize = int64(le.Uint16(sb[0xFE:]))
	}
	blocks := int64(le.Uint32(sb[0x4:]))
	if f.incompat64 {
		blocks |= int64(le.Uint32(sb[0x150:])) << 32
	}
	bpg := int64(le.Uint32(sb[0x20:]))
	first := int64(le.Uint32(sb[0x14:]))
	switch {
	case f.inodeSize < 128 || f.inodeSize > f.bs || f.inodeSize&(f.inodeSize-1) != 0:
		return fmt.Errorf("ext4: inode size %d", f.inodeSize)
	case descSize < 32 || descSize > 1024:
		return fmt.Errorf("ext4: group descriptor size %d", descSize)
	case bpg < 1 || f.ipg < 1 || blocks < 1 || blocks > f.size/f.bs+1:
		return fmt.Errorf("ext4: %d blocks, %d a group, %d inodes a group in %d bytes", blocks, bpg, f.ipg, f.size)
	}
	groups := (blocks - first + bpg - 1) / bpg
	if groups < 1 || groups*descSize > f.size || f.ipg*groups < f.inodes {
		return fmt.Errorf("ext4: %d groups", groups)
	}
	gd := make([]byte, groups*descSize)
	if err := f.read(gd, (first+1)*f.bs); err != nil {
		return err
	}
	f.tables = make([]int64, groups)
	for g := range groups {
		d := gd[g*descSize:]
		t := int64(le.Uint32(d[0x8:]))
		if f.incompat64 && descSize >= 64 {
			t |= int64(le.Uint32(d[0x28:])) << 32
		}
		f.tables[g] = t
	}
	return nil
}

type inode struct {
	mode  uint16
	flags uint32
	size  int64
	block [60]byte
}

func (f *fs) inode(n uint32) (inode, error) {
	if n < 1 || int64(n) > f.inodes {
		return inode{}, fmt.Errorf("ext4: inode %d of %d", n, f.inodes)
	}
	g, i := (int64(n)-1)/f.ipg, (int64(n)-1)%f.ipg
	if g >= int64(len(f.tables)) {
		return inode{}, fmt.Errorf("ext4: inode %d in group %d of %d", n, g, len(f.tables))
	}
	b := make([]byte, 160)[:min(160, f.inodeSize)]
	if err := f.read(b, f.tables[g]*f.bs+i*f.inodeSize); err != nil {
		return inode{}, err
	}
	le := binary.LittleEndian
	in := inode{mode: le.Uint16(b[0:]), flags: le.Uint32(b[0x20:]), size: int64(le.Uint32(b[0x4:]))}
	in.size |= int64(le.Uint32(b[0x6C:])) << 32
	copy(in.block[:], b[0x28:0x28+60])
	if in.size < 0 {
		return inode{}, fmt.Errorf("ext4: inode %d: size %d", n, in.size)
	}
	return in, nil
}

// extentsOf lists in's initialized extents inside its size, or nil for a file
// whose bytes the reader does not map (block-mapped, inline).
func (f *fs) extentsOf(in inode) ([]Extent, error) {
	if in.flags&flagExtents == 0 || in.flags&flagInline != 0 {
		return nil, nil
	}
	var out []Extent
	if err := f.node(in.block[:], maxTreeDepth, &out); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Extent) int { return int(min(max(a.Logical-b.Logical, -1), 1)) })
	for i := 1; i < len(out); i++ {
		if out[i].Logical < out[i-1].Logical+out[i-1].Len {
			return nil, fmt.Errorf("ext4: extents overlap at byte %d", out[i].Logical)
		}
	}
	// Bytes past the size are the last block's slack: not the file's.
	for i := range out {
		if out[i].Logical >= in.size {
			out = out[:i]
			break
		}
		out[i].Len = min(out[i].Len, in.size-out[i].Logical)
	}
	return out, nil
}

func (f *fs) node(b []byte, depthLeft int, out *[]Extent) error {
	le := binary.LittleEndian
	if len(b) < 12 || le.Uint16(b[0:]) != extentMagic {
		return fmt.Errorf("ext4: extent node without its magic")
	}
	n, depth := int(le.Uint16(b[2:])), int(le.Uint16(b[6:]))
	if 12+12*n > len(b) || depth >= depthLeft {
		return fmt.Errorf("ext4: extent node of %d entries, depth %d", n, depth)
	}
	for k := range n {
		e := b[12+12*k:]
		if depth == 0 {
			l := int64(le.Uint16(e[4:]))
			if l > uninitMarker {
				continue // unwritten: reads as zeros
			}
			phys := (int64(le.Uint16(e[6:]))<<32 | int64(le.Uint32(e[8:]))) * f.bs
			x := Extent{Logical: int64(le.Uint32(e[0:])) * f.bs, Physical: phys, Len: l * f.bs}
			if x.Len == 0 || x.Physical < 0 || x.Physical > f.size-x.Len {
				return fmt.Errorf("ext4: extent %d+%d outside the image", x.Physical, x.Len)
			}
			if f.extents++; f.extents > maxExtents {
				return fmt.Errorf("ext4: more than %d extents", maxExtents)
			}
			*out = append(*out, x)
			continue
		}
		child := make([]byte, f.bs)
		leaf := int64(le.Uint16(e[8:]))<<32 | int64(le.Uint32(e[4:]))
		if err := f.read(child, leaf*f.bs); err != nil {
			return err
		}
		if err := f.node(child, depth, out); err != nil {
			return err
		}
	}
	return nil
}

// walk lists the files under directory ino, whose path is dir.
func (f *fs) walk(ino uint32, dir string, depth int) error {
	if depth > maxDepth || f.seen[ino] {
		return nil
	}
	f.seen[ino] = true
	in, err := f.inode(ino)
	if err != nil {
		return err
	}
	if in.mode&modeMask != modeDir || in.flags&flagEncrypt != 0 {
		return nil
	}
	if in.size > maxDirBytes {
		return fmt.Errorf("ext4: directory %q of %d bytes", dir+"/", in.size)
	}
	ext, err := f.extentsOf(in)
	if err != nil {
		return fmt.Errorf("%w (directory %q)", err, dir+"/")
	}
	for _, x := range ext {
		data := make([]byte, x.Len)
		if err := f.read(data, x.Physical); err != nil {
			return err
		}
		for b := int64(0); b < x.Len; b += f.bs {
			if err := f.entries(data[b:min(b+f.bs, x.Len)], dir, depth); err != nil {
				return err
			}
		}
	}
	return nil
}

// entries reads the linear directory entries of data, one block: an htree directory's
// index blocks read as entries of inode 0, skipped.
func (f *fs) entries(data []byte, dir string, depth int) error {
	le := binary.LittleEndian
	for off := 0; off+8 <= len(data); {
		ino, rec, nl := le.Uint32(data[off:]), int(le.Uint16(data[off+4:])), int(data[off+6])
		if rec < 8 || off+rec > len(data) || 8+nl > rec {
			return nil // the rest of this block is not entries: skip it
		}
		name := string(data[off+8 : off+8+nl])
		off += rec
		if ino == 0 || name == "." || name == ".." || nl == 0 {
			continue
		}
		p := dir + "/" + name
		in, err := f.inode(ino)
		if err != nil {
			return err
		}
		switch in.mode & modeMask {
		case modeDir:
			if err := f.walk(ino, p, depth+1); err != nil {
				return err
			}
		case modeRegular:
			if len(f.files) >= maxFiles {
				return fmt.Errorf("ext4: more than %d files", maxFiles)
			}
			ext, err := f.extentsOf(in)
			if err != nil {
				return fmt.Errorf("%w (file %q)", err, p)
			}
			f.files = append(f.files, File{Path: p, Size: in.size, Extents: ext})
		}
	}
	return nil
}
