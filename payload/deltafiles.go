package payload

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"sort"

	"github.com/otad/otad/payload/ext4"
)

// FileMap is where an image keeps each of its files' bytes (payload/ext4 reads it
// from an ext4 image at signing): with the older image's, it tells BuildDelta where
// the older image keeps the old bytes of the files a chunk holds — the same path, or
// a file of the same name moved to another directory — wherever they lie, so that a
// chunk of changed files is a delta against their own old bytes (file-aware deltas,
// docs/contract/chunked.md). A map is a hint: a chunk a delta makes is checked by its
// SHA-256 like any other.
type FileMap struct {
	files  []ext4.File
	byPath map[string]int
	byBase map[string][]int
	disk   []diskExtent // every extent, by its offset in the image
}

type diskExtent struct {
	file int
	x    ext4.Extent
}

// NewFileMap indexes files, as ext4.Read lists them.
func NewFileMap(files []ext4.File) *FileMap {
	m := &FileMap{files: files, byPath: map[string]int{}, byBase: map[string][]int{}}
	for i, f := range files {
		m.byPath[f.Path] = i
		m.byBase[path.Base(f.Path)] = append(m.byBase[path.Base(f.Path)], i)
		for _, x := range f.Extents {
			m.disk = append(m.disk, diskExtent{i, x})
		}
	}
	slices.SortFunc(m.disk, func(a, b diskExtent) int { return cmp.Compare(a.x.Physical, b.x.Physical) })
	return m
}

// ReadFileMap reads the file map of the ext4 image r (size bytes); an image that is
// not ext4 has none: nil, and no error.
func ReadFileMap(r io.ReaderAt, size int64) (*FileMap, error) {
	files, err := ext4.Read(r, size)
	if errors.Is(err, ext4.ErrNotExt4) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("file map: %w", err)
	}
	return NewFileMap(files), nil
}

// Files is the number of files mapped.
func (m *FileMap) Files() int { return len(m.files) }

// DeltaOption tunes BuildDelta.
type DeltaOption func(*deltaOpts)

type deltaOpts struct {
	old, new *FileMap
	report   func(ChunkReport)
}

// WithFiles makes BuildDelta file-aware: old and new are the file maps of the older
// and the new image. Its delta index is then version 2, whose records name as many
// ranges as a chunk's files need.
func WithFiles(old, new *FileMap) DeltaOption {
	return func(o *deltaOpts) {
		if old != nil && new != nil {
			o.old, o.new = old, new
		}
	}
}

// fileSpan is the part of one file a chunk of the new image holds.
type fileSpan struct {
	file          int
	lo, hi, bytes int64 // logical bytes [lo, hi), bytes of them in the chunk
}

// spans lists the files whose bytes lie in [off, off+n) of the image, heaviest first.
func (m *FileMap) spans(off, n int64) []fileSpan {
	var out []fileSpan
	i := sort.Search(len(m.disk), func(i int) bool { return m.disk[i].x.Physical+m.disk[i].x.Len > off })
	for ; i < len(m.disk) && m.disk[i].x.Physical < off+n; i++ {
		d := m.disk[i]
		lo, hi := max(off, d.x.Physical), min(off+n, d.x.Physical+d.x.Len)
		if lo >= hi {
			continue
		}
		l := d.x.Logical + lo - d.x.Physical
		k := slices.IndexFunc(out, func(s fileSpan) bool { return s.file == d.file })
		if k < 0 {
			out = append(out, fileSpan{d.file, l, l + hi - lo, hi - lo})
			continue
		}
		out[k].lo, out[k].hi, out[k].bytes = min(out[k].lo, l), max(out[k].hi, l+hi-lo), out[k].bytes+hi-lo
	}
	slices.SortStableFunc(out, func(a, b fileSpan) int { return cmp.Compare(b.bytes, a.bytes) })
	return out
}

// match is the older image's file for the new image's file f: the same path, else
// the file of the same name nearest it in size (a file moved to another directory).
func (m *FileMap) match(f ext4.File) (ext4.File, bool) {
	if i, ok := m.byPath[f.Path]; ok {
		return m.files[i], true
	}
	best, found := ext4.File{}, false
	for _, i := range m.byBase[path.Base(f.Path)] {
		c := m.files[i]
		if !found || abs(c.Size-f.Size) < abs(best.Size-f.Size) {
			best, found = c, true
		}
	}
	return best, found
}

func abs(v int64) int64 { return max(v, -v) }

// fileRanges are the ranges of the older image that hold the old bytes of the files
// in bytes [off, off+n) of the new image: for each file, heaviest first, its old bytes
// around the same place in the file (reaching as far again as the file grew or
// shrank), at most limit bytes and maxN ranges in all, the heaviest last (nearest the
// chunk, for zstd's shorter offsets).
func fileRanges(o deltaOpts, off, n, limit int64, maxN int) []Range {
	var groups [][]Range
	var total, count int
	for _, s := range o.new.spans(off, n) {
		f := o.new.files[s.file]
		old, ok := o.old.match(f)
		if !ok || old.Size == 0 {
			continue
		}
		pad := dictPad + min(abs(old.Size-f.Size), limit)
		lo, hi := max(0, s.lo-pad), min(old.Size, s.hi+pad)
		if lo >= hi { // the old file is shorter: its tail
			lo, hi = max(0, old.Size-(s.hi-s.lo)-pad), old.Size
		}
		var rs []Range
		for _, x := range old.Extents {
			a, b := max(lo, x.Logical), min(hi, x.Logical+x.Len)
			if a >= b {
				continue
			}
			if count == maxN || int64(total) >= limit {
				break
			}
			r := Range{Off: x.Physical + a - x.Logical, Len: min(b-a, limit-int64(total))}
			if k := len(rs) - 1; k >= 0 && rs[k].Off+rs[k].Len == r.Off {
				rs[k].Len += r.Len
			} else {
				rs = append(rs, r)
				count++
			}
			total += int(r.Len)
		}
		groups = append(groups, rs)
	}
	slices.Reverse(groups)
	return slices.Concat(groups...)
}

// fileSource is the source of a binary diff of bytes [off, off+n) of the new image:
// the older image's bytes of the file that holds most of them (its extents, one
// after another), when that file is at most MaxDiffSource bytes in at most maxN
// ranges; and a key for that file.
func fileSource(o deltaOpts, off, n int64, maxN int) (int, []Range) {
	s := o.new.spans(off, n)
	if len(s) == 0 {
		return 0, nil
	}
	old, ok := o.old.match(o.new.files[s[0].file])
	if !ok || old.Size == 0 || old.Size > MaxDiffSource {
		return 0, nil
	}
	var rs []Range
	for _, x := range old.Extents {
		if k := len(rs) - 1; k >= 0 && rs[k].Off+rs[k].Len == x.Physical {
			rs[k].Len += x.Len
			continue
		}
		if len(rs) == maxN {
			return 0, nil
		}
		rs = append(rs, Range{Off: x.Physical, Len: x.Len})
	}
	return o.old.byPath[old.Path], rs
}
