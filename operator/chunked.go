package operator

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
	"github.com/otad/otad/verify"
)

// chunkedLevel is the zstd level of a chunked store: signing is done once, every
// device fetches the result. 19 is the encoder's best, as for a zstd stream
// payload: on an ext4 of rootfs-like files its chunks take 4.6% fewer bytes
// than at 9, and decode as fast (issue 30).
const chunkedLevel = 19

// chunkedOpts is how sign --chunked cuts and stores an image.
type chunkedOpts struct {
	chunkSize int64
	comp      ota.Compression
	chunking  ota.Chunking
	// stream, when set, receives the image as it is read (to size the full stream).
	stream io.Writer
	// progress counts the image's bytes as they are read; nil: none shown.
	progress *signProgress
}

// pending are files written beside their paths, to be renamed into place together
// once all are whole, in order: the deltas and the store before the index that
// names them.
type pending []*outFile

func (p *pending) add(f *outFile) { *p = append(*p, f) }

func (p pending) commit() error {
	for _, f := range p {
		if err := f.commit(); err != nil {
			return err
		}
	}
	return nil
}

func (p pending) abort() {
	for _, f := range p {
		f.abort()
	}
}

// prepareChunked cuts the image into out.store and out.idx (docs/contract/chunked.md), streaming it
// once, into files added to files (store first) and left for the caller to commit.
func prepareChunked(ctx context.Context, image, out string, o chunkedOpts, files *pending) (*payload.Result, error) {
	in, err := os.Open(image)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer in.Close()
	// Refused before a byte is written: every device would refuse the index.
	if st, err := in.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > 0 && payload.ValidChunkSize(o.chunkSize) {
		if n := estimatedIndex(st.Size(), o); n > payload.MaxIndexSize {
			return nil, fmt.Errorf("image %s: %d bytes in chunks of %d make an index of about %d bytes, more than a device holds (%d): use a larger --chunk-size", image, st.Size(), o.chunkSize, n, payload.MaxIndexSize)
		}
	}
	store, err := createOut(out + ".store")
	if err != nil {
		return nil, err
	}
	files.add(store)
	idx, err := createOut(out + ".idx")
	if err != nil {
		return nil, err
	}
	files.add(idx)

	bw := bufio.NewWriterSize(store, copyBufferSize)
	src := o.progress.reader(in)
	if o.stream != nil {
		src = io.TeeReader(src, o.stream)
	}
	res, err := payload.Build(ctx, src, bw, payload.Options{ChunkSize: o.chunkSize, Compression: o.comp, Level: chunkedLevel, Chunking: o.chunking})
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", image, err)
	}
	if o.chunking == ota.ChunkingCDC {
		if n := payload.IndexSize2(res.ChunkCount); n > payload.MaxIndexSize {
			return nil, fmt.Errorf("image %s: %d chunks make an index of %d bytes, more than a device holds (%d): use a larger --chunk-size", image, res.ChunkCount, n, payload.MaxIndexSize)
		}
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("out-payload %s: %w", store.path, err)
	}
	if _, err := idx.Write(res.Index); err != nil {
		return nil, fmt.Errorf("out-payload %s: %w", idx.path, err)
	}
	return res, nil
}

// estimatedIndex is the size of the index of size bytes: exact for fixed chunks; for
// content-defined ones, as if no byte were zero and chunks had their mean size (the
// minimum and half the nominal size: docs/contract/chunked.md).
func estimatedIndex(size int64, o chunkedOpts) int64 {
	if o.chunking != ota.ChunkingCDC {
		return payload.IndexSize(payload.ChunkCount(size, o.chunkSize))
	}
	p := payload.CDCFor(o.chunkSize)
	return payload.IndexSize2(payload.ChunkCount(size, p.Min+p.Avg/2))
}

// chunkedPayload is the schema-2 payload of a built image whose files are served at
// url.idx and url.store.
func chunkedPayload(res *payload.Result, url string) verify.Payload {
	return verify.Payload{
		Size:   res.ImageSize,
		SHA256: hex.EncodeToString(res.ImageSHA256[:]),
		Chunks: res.Chunks(url),
	}
}

// reportChunked tells the operator what was written.
func reportChunked(w io.Writer, out string, res *payload.Result) {
	if res.Chunking == ota.ChunkingCDC {
		fmt.Fprintf(w, "%s.idx: %d bytes, %d content-defined chunks of about %d bytes (%d zero runs, %d raw, %d zstd); %s.store: %d bytes for a %d-byte image\n",
			out, len(res.Index), res.ChunkCount, res.ChunkSize, res.Zero, res.Raw, res.Zstd, out, res.StoreSize, res.ImageSize)
		return
	}
	fmt.Fprintf(w, "%s.idx: %d chunks of %d bytes (%d zero, %d raw, %d zstd); %s.store: %d bytes for a %d-byte image\n",
		out, res.ChunkCount, res.ChunkSize, res.Zero, res.Raw, res.Zstd, out, res.StoreSize, res.ImageSize)
}

// chunkedCheck is what verify --payload checked of a chunked payload: the chunks
// of its index and store, and each delta file, in the manifest's order.
type chunkedCheck struct {
	chunks int
	deltas []deltaCheck
}

// deltaCheck is a delta file verify --payload checked: its size and its index.
type deltaCheck struct {
	path  string
	entry int // payload.chunks.deltas[entry]
	d     ota.Delta
	count int // records of its index
}

// String is verify's line for the file, in the words of its other lines.
func (c deltaCheck) String() string {
	return fmt.Sprintf("%s: payload.chunks.deltas[%d], from sha256 %s… (%d bytes): %d bytes OK, delta index OK (%d records)",
		c.path, c.entry, c.d.From[:12], c.d.FromSize, c.d.Size, c.count)
}

// checkChunked checks out.idx and out.store against a manifest's chunked payload: the
// index as a device would check it, then every chunk and the image they make, then
// each delta file's size and index.
func checkChunked(ctx context.Context, p *verify.Payload, out string) (chunkedCheck, error) {
	want := verify.Expect(p)
	f, err := os.Open(out + ".idx")
	if err != nil {
		return chunkedCheck{}, err
	}
	defer f.Close()
	// One byte more than the manifest allows tells a longer file from a whole one.
	data, err := io.ReadAll(io.LimitReader(f, want.IndexSize+1))
	if err != nil {
		return chunkedCheck{}, fmt.Errorf("%s.idx: %w", out, err)
	}
	x, err := payload.ParseIndex(data, want)
	if err != nil {
		return chunkedCheck{}, fmt.Errorf("%s.idx: %w", out, err)
	}
	s, err := os.Open(out + ".store")
	if err != nil {
		return chunkedCheck{}, err
	}
	defer s.Close()
	if err := payload.CheckStore(ctx, x, bufio.NewReaderSize(s, copyBufferSize), p.SHA256, io.Discard); err != nil {
		return chunkedCheck{}, fmt.Errorf("%s.store: %w", out, err)
	}
	res := chunkedCheck{chunks: x.Count()}
	if p.Chunks.Deltas != nil {
		for k, d := range *p.Chunks.Deltas {
			c, err := checkDeltaFile(p, k, x, out+deltaFileSuffix(d.From))
			if err != nil {
				return chunkedCheck{}, err
			}
			res.deltas = append(res.deltas, c)
		}
	}
	return res, nil
}

// deltaFileSuffix is deltaName of an entry's from (64 hex digits, checked).
func deltaFileSuffix(from string) string {
	b, _ := hex.DecodeString(from)
	return deltaName([32]byte(b))
}

// checkDeltaFile checks the delta file of deltas entry k as a device would before
// using it: its size, and its index against the entry and x. (Its deltas decode only
// with the older image's bytes; every chunk they make is checked on the device.)
// A file that cannot be read is named with its entry: as a missing index or store,
// it is no refusal of the offer (exit 1), only of what is at hand.
func checkDeltaFile(p *verify.Payload, k int, x *payload.Index, path string) (deltaCheck, error) {
	entry := (*p.Chunks.Deltas)[k]
	want := verify.DeltaExpect(p, k)
	at := fmt.Sprintf("payload.chunks.deltas[%d]", k)
	unread := func(err error) error {
		return fmt.Errorf("%s: the delta file of %s (from sha256 %s…): %w", path, at, entry.From[:12], pathless(err))
	}
	f, err := os.Open(path)
	if err != nil {
		return deltaCheck{}, unread(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return deltaCheck{}, unread(err)
	}
	if st.Size() != want.Size {
		return deltaCheck{}, ota.Errorf(ota.CodeSizeMismatch, "%s: %d bytes, %s.size says %d", path, st.Size(), at, want.Size)
	}
	idx := make([]byte, want.IndexSize)
	if _, err := io.ReadFull(f, idx); err != nil {
		return deltaCheck{}, unread(err)
	}
	d, err := payload.ParseDelta(idx, want, x, at)
	if err != nil {
		return deltaCheck{}, fmt.Errorf("%s: %w", path, err)
	}
	return deltaCheck{path: path, entry: k, d: entry, count: d.Count()}, nil
}
