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
// device fetches the result.
const chunkedLevel = 9

// prepareChunked cuts the image into out.store and out.idx (docs/contract/chunked.md), streaming it
// once; each file is written beside its path and renamed into place only when whole,
// the store first, so an index is never published without its store.
func prepareChunked(ctx context.Context, image, out string, chunkSize int64, comp ota.Compression) (*payload.Result, error) {
	in, err := os.Open(image)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer in.Close()
	// Refused before a byte is written: every device would refuse the index.
	if st, err := in.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > 0 && payload.ValidChunkSize(chunkSize) {
		if n := payload.IndexSize(payload.ChunkCount(st.Size(), chunkSize)); n > payload.MaxIndexSize {
			return nil, fmt.Errorf("image %s: %d bytes in chunks of %d make an index of %d bytes, more than a device holds (%d): use a larger --chunk-size", image, st.Size(), chunkSize, n, payload.MaxIndexSize)
		}
	}
	store, err := createOut(out + ".store")
	if err != nil {
		return nil, err
	}
	defer store.abort()
	idx, err := createOut(out + ".idx")
	if err != nil {
		return nil, err
	}
	defer idx.abort()

	bw := bufio.NewWriterSize(store, copyBufferSize)
	res, err := payload.Build(ctx, in, bw, payload.Options{ChunkSize: chunkSize, Compression: comp, Level: chunkedLevel})
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", image, err)
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("out-payload %s: %w", store.path, err)
	}
	if _, err := idx.Write(res.Index); err != nil {
		return nil, fmt.Errorf("out-payload %s: %w", idx.path, err)
	}
	if err := store.commit(); err != nil {
		return nil, err
	}
	if err := idx.commit(); err != nil {
		return nil, err
	}
	return res, nil
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
	fmt.Fprintf(w, "%s.idx: %d chunks of %d bytes (%d zero, %d raw, %d zstd); %s.store: %d bytes for a %d-byte image\n",
		out, res.ChunkCount, res.ChunkSize, res.Zero, res.Raw, res.Zstd, out, res.StoreSize, res.ImageSize)
}

// checkChunked checks out.idx and out.store against a manifest's chunked payload: the
// index as a device would check it, then every chunk and the image they make.
func checkChunked(ctx context.Context, p *verify.Payload, out string) (int, error) {
	want := verify.Expect(p)
	f, err := os.Open(out + ".idx")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// One byte more than the manifest allows tells a longer file from a whole one.
	data, err := io.ReadAll(io.LimitReader(f, want.IndexSize+1))
	if err != nil {
		return 0, fmt.Errorf("%s.idx: %w", out, err)
	}
	x, err := payload.ParseIndex(data, want)
	if err != nil {
		return 0, fmt.Errorf("%s.idx: %w", out, err)
	}
	s, err := os.Open(out + ".store")
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if err := payload.CheckStore(ctx, x, bufio.NewReaderSize(s, copyBufferSize), p.SHA256, io.Discard); err != nil {
		return 0, fmt.Errorf("%s.store: %w", out, err)
	}
	return x.Count(), nil
}
