package payload

import (
	"bytes"
	"io"
)

// DeltaHow is how BuildDelta makes a chunk of the new image for a device that holds
// the older image: what the delta file and the store cost for it.
type DeltaHow int

const (
	HowHeld      DeltaHow = iota // the older image holds it: nothing fetched
	HowShift                     // a delta against the old bytes where its pieces or neighbours lie
	HowFile                      // a delta against the old bytes of its own files
	HowDiff                      // a binary diff against the old bytes of its own file
	HowDiffShift                 // a binary diff against the old bytes where its pieces or neighbours lie
	HowWhole                     // fetched whole from the store
)

func (h DeltaHow) String() string {
	return [...]string{"held", "delta vs neighbours", "delta vs own file", "binary diff vs own file", "binary diff vs neighbours", "whole"}[h]
}

// ChunkReport is what BuildDelta did with one chunk (not a zero chunk): Bytes
// are what a device holding the older image fetches for it, its delta and its
// record, or its stored bytes when fetched whole.
type ChunkReport struct {
	Chunk  int
	Offset int64
	Length int
	How    DeltaHow
	Bytes  int64
}

// WithReport makes BuildDelta call fn for each chunk that is not a zero chunk,
// in chunk order: where a delta file's bytes go (bench/deltabytes).
func WithReport(fn func(ChunkReport)) DeltaOption {
	return func(o *deltaOpts) { o.report = fn }
}

func (o *deltaOpts) tell(i int, c Chunk, how DeltaHow, n int64) {
	if o.report != nil {
		o.report(ChunkReport{Chunk: i, Offset: c.Offset, Length: c.Length, How: how, Bytes: n})
	}
}

// FileKind is a rough class of the bytes of an image, for the breakdown of
// where a delta's bytes go.
type FileKind int

const (
	KindMeta       FileKind = iota // no regular file's bytes: inode tables, directories, bitmaps, journal
	KindELF                        // executables and shared libraries
	KindCompressed                 // gzip, xz, zstd, bzip2 files
	KindText                       // files whose first bytes are text
	KindOtherFile                  // any other file
)

func (k FileKind) String() string {
	return [...]string{"metadata", "ELF", "compressed", "text", "other file"}[k]
}

// KindAt is the class of the file holding most of bytes [off, off+n) of the image
// img that m maps, by the first bytes of that file, and its path ("" for metadata).
func (m *FileMap) KindAt(img io.ReaderAt, off, n int64) (FileKind, string) {
	if m == nil {
		return KindMeta, ""
	}
	s := m.spans(off, n)
	var inFiles int64
	for _, f := range s {
		inFiles += f.bytes
	}
	if len(s) == 0 || 2*inFiles < n {
		return KindMeta, ""
	}
	f := m.files[s[0].file]
	var head [512]byte
	k := 0
	if len(f.Extents) > 0 && f.Extents[0].Logical == 0 {
		k, _ = img.ReadAt(head[:min(int64(len(head)), f.Extents[0].Len)], f.Extents[0].Physical)
	}
	return kindOf(head[:k]), f.Path
}

func kindOf(b []byte) FileKind {
	switch {
	case bytes.HasPrefix(b, []byte("\x7fELF")):
		return KindELF
	case bytes.HasPrefix(b, []byte{0x1f, 0x8b}), bytes.HasPrefix(b, []byte("\xfd7zXZ")),
		bytes.HasPrefix(b, []byte{0x28, 0xb5, 0x2f, 0xfd}), bytes.HasPrefix(b, []byte("BZh")):
		return KindCompressed
	}
	for _, c := range b {
		if c < 0x09 || c > 0x0d && c < 0x20 {
			return KindOtherFile
		}
	}
	return KindText
}
