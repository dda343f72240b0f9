package operator

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// deltaName is the suffix of the delta file from the image whose sha256 is from:
// PATH.from-<its first 12 hex>.delta, served at URL.from-<…>.delta.
func deltaName(from [32]byte) string { return ".from-" + hex.EncodeToString(from[:6]) + ".delta" }

// streamSizer counts the bytes of the image as one zstd stream, as sign --compress
// zstd writes it: the full download deltas are weighed against.
type streamSizer struct {
	n   countingWriter
	enc *zstd.Encoder
}

func newStreamSizer() (*streamSizer, error) {
	s := &streamSizer{}
	enc, err := zstd.NewWriter(&s.n, zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
	if err != nil {
		return nil, err
	}
	s.enc = enc
	return s, nil
}

func (s *streamSizer) Write(p []byte) (int, error) { return s.enc.Write(p) }

// size ends the stream and returns its bytes.
func (s *streamSizer) size() (int64, error) {
	if err := s.enc.Close(); err != nil {
		return 0, err
	}
	return s.n.n, nil
}

// splitList is the values of a repeatable flag, each also split at commas.
func splitList(l []string) []string {
	var out []string
	for _, v := range l {
		for _, s := range strings.Split(v, ",") {
			if s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// deltaJob is what writing the deltas against older images needs.
type deltaJob struct {
	image, out, url string
	res             *payload.Result
	stream          int64 // the image as one zstd stream
	olds            []string
}

// buildDeltas writes out.from-<…>.delta for each older image and returns the
// manifest's deltas entries, telling the operator what a device holding each older
// image fetches against the full stream and the whole chunked payload. A file whose
// deltas would not make that device fetch less than the chunked payload alone is not
// written, and says so.
func buildDeltas(ctx context.Context, j deltaJob, files *pending, stderr io.Writer) ([]ota.Delta, error) {
	x, err := payload.ParseIndex(j.res.Index, j.res.Expect())
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", j.image, err)
	}
	newImg, err := os.Open(j.image)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer newImg.Close()
	newFiles := fileMap(newImg, j.image, stderr)
	full := int64(len(j.res.Index)) + j.res.StoreSize
	var entries []ota.Delta
	seen := map[[32]byte]bool{}
	for _, old := range j.olds {
		r, frames, err := deltaFrom(ctx, old, newImg, newFiles, x, filepath.Dir(j.out), stderr)
		if err != nil {
			return nil, err
		}
		name := j.out + deltaName(r.From)
		fetch, alone := r.Fetch(x), r.FetchChunks(x)
		from := fmt.Sprintf("%s (sha256 %x…, %d bytes)", old, r.From[:6], r.FromSize)
		switch {
		case r.From == j.res.ImageSHA256:
			fmt.Fprintf(stderr, "--delta-from %s: the image itself: no deltas\n", from)
		case seen[r.From]:
			fmt.Fprintf(stderr, "--delta-from %s: an image given before: no deltas\n", from)
		case r.Count == r.Copies || fetch >= alone:
			why := "no chunk it lacks has a delta smaller than the chunk"
			switch {
			case r.Count == r.Copies && r.Full == 0:
				why = "it holds every chunk"
			case r.Count > r.Copies:
				why = fmt.Sprintf("deltas of %d chunks would take %d bytes with their index, the chunks %d", r.Count-r.Copies, r.Size(), r.RebuiltStored)
			}
			fmt.Fprintf(stderr, "--delta-from %s: %s: none written; a device holding it fetches %d bytes, %s of the full stream (%d bytes, zstd) and %s of the chunked payload (%d bytes): %s\n",
				from, why, alone, percent(alone, j.stream), j.stream, percent(alone, full), full, shares(r, x.ImageSize(), false))
		default:
			f, err := writeDelta(name, r, frames)
			if err != nil {
				return nil, err
			}
			// Before the store and the index: published first.
			*files = append(pending{f}, *files...)
			entries = append(entries, r.Entry(j.url+deltaName(r.From), x))
			fmt.Fprintf(stderr, "%s: deltas of %d chunks%s and %d copy records (where it holds chunks elsewhere) from %s: a device holding it fetches %d bytes, %s of the full stream (%d bytes, zstd), %s of the chunked payload (%d bytes) and %s of the %d bytes it fetches without deltas: %s\n",
				name, r.Count-r.Copies, byFile(r), r.Copies, from, fetch, percent(fetch, j.stream), j.stream, percent(fetch, full), full, percent(fetch, alone), alone, shares(r, x.ImageSize(), true))
		}
		seen[r.From] = true
		frames.Close()
		os.Remove(frames.Name())
	}
	return entries, nil
}

// checkOlderImages checks that each --delta-from file is a regular file, non-empty
// and readable, naming the flag and the file: the deltas are built after the
// whole chunked payload, too late to learn of a typo.
func checkOlderImages(paths []string) error {
	for _, p := range paths {
		if err := checkOlderImage(p); err != nil {
			return fmt.Errorf("--delta-from %s: %w", p, err)
		}
	}
	return nil
}

func checkOlderImage(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return pathless(err)
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return err
	case st.IsDir():
		return errors.New("a directory: want an older image file")
	case !st.Mode().IsRegular():
		return fmt.Errorf("not a regular file (%s): want an older image file", st.Mode().Type())
	case st.Size() == 0:
		return errors.New("an empty file: want an older image")
	}
	if _, err := f.Read(make([]byte, 1)); err != nil {
		return fmt.Errorf("unreadable: %w", err)
	}
	return nil
}

// pathless is err without the path an *fs.PathError repeats, for a caller
// that names the file itself; any other error as it is (never nil for an
// error: errors.Unwrap alone would drop one that wraps nothing).
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// deltaFrom builds the deltas of x's image against the older image at path into a
// temporary file in dir, returned rewound.
func deltaFrom(ctx context.Context, path string, newImg *os.File, newFiles *payload.FileMap, x *payload.Index, dir string, stderr io.Writer) (*payload.DeltaResult, *os.File, error) {
	old, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--delta-from %s: %w", path, pathless(err))
	}
	defer old.Close()
	st, err := old.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("--delta-from %s: %w", path, err)
	}
	frames, err := os.CreateTemp(dir, ".deltas.tmp-*")
	if err != nil {
		return nil, nil, fmt.Errorf("out-payload: %w", err)
	}
	bw := bufio.NewWriterSize(frames, copyBufferSize)
	var opts []payload.DeltaOption
	if newFiles != nil {
		opts = append(opts, payload.WithFiles(fileMap(old, path, stderr), newFiles))
	}
	r, err := payload.BuildDelta(ctx, old, st.Size(), newImg, x, bw, opts...)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		_, err = frames.Seek(0, io.SeekStart)
	}
	if err != nil {
		frames.Close()
		os.Remove(frames.Name())
		return nil, nil, fmt.Errorf("--delta-from %s: %w", path, err)
	}
	return r, frames, nil
}

// writeDelta writes the delta file, its index then the deltas, beside name.
func writeDelta(name string, r *payload.DeltaResult, frames io.Reader) (*outFile, error) {
	f, err := createOut(name)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(r.Index); err != nil {
		f.abort()
		return nil, fmt.Errorf("out-payload %s: %w", name, err)
	}
	if n, err := io.Copy(f, frames); err != nil || n != r.DeltasSize {
		f.abort()
		return nil, fmt.Errorf("out-payload %s: %d of %d bytes of deltas: %v", name, n, r.DeltasSize, err)
	}
	return f, nil
}

// shares says where the image's bytes come from for a device holding r's older
// image: held, rebuilt from deltas (when they are written), fetched whole, zeros.
func shares(r *payload.DeltaResult, size int64, deltas bool) string {
	zeros := size - r.Held - r.Rebuilt - r.Full
	if !deltas {
		return fmt.Sprintf("it holds %s of the image, %s is fetched whole, %s is zeros",
			percent(r.Held, size), percent(r.Rebuilt+r.Full, size), percent(zeros, size))
	}
	return fmt.Sprintf("it holds %s of the image, deltas rebuild %s, %s is fetched whole, %s is zeros",
		percent(r.Held, size), percent(r.Rebuilt, size), percent(r.Full, size), percent(zeros, size))
}

// percent is a of b, as "4.2%".
func percent(a, b int64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}
