package slots

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// TestChunkedDeltaFactoryImage: a booted slot that holds the older image, written
// straight into it (flashed at the factory: the journal knows nothing of it, or names
// another image), is known by the sha256 of its first from_size bytes, hashed in the
// one scan of the slot: the install fetches that image's deltas, rebuilds chunks from
// them and the slot holds the new image byte for byte. A second install on the same
// device finds the sums in the kept scan and takes the deltas again without one.
func TestChunkedDeltaFactoryImage(t *testing.T) {
	oldImg, newImg := update(t)
	r := makeRelease(t, oldImg, newImg)
	for name, journal := range map[string]string{"unknown": "", "another image": strings.Repeat("e", 64)} {
		t.Run(name, func(t *testing.T) {
			d := newChunkSlots(t, len(newImg)+8192, oldImg)
			for run := range 2 {
				s, j := r.serve(t, d, journal)
				p := installDelta(t, j)
				if got := readFile(t, d.target)[:len(newImg)]; !bytes.Equal(got, newImg) {
					t.Fatalf("run %d: the slot does not hold the image", run)
				}
				t.Logf("run %d: %+v; the delta file sent %d bytes", run, p, s.sent["/rel.delta"].Load())
				if p.Path != ota.PathDelta || p.BytesDelta == 0 || p.BytesReused == 0 || s.sent["/rel.delta"].Load() <= r.entry.IndexSize ||
					p.BytesFetched != s.total() || p.BytesFetched > r.entry.Fetch+4096 {
					t.Fatalf("run %d: progress %+v, served %d, the manifest's fetch %d", run, p, s.total(), r.entry.Fetch)
				}
				// The scan is kept with the prefix's sum: the next install reads it.
				if sum := sha256.Sum256(oldImg); !bytes.Contains(readFile(t, filepath.Join(d.state, chunkDirName, scanName)), sum[:]) {
					t.Fatal("the kept scan has no sum of the older image")
				}
				if err := os.WriteFile(d.target, bytes.Repeat([]byte{0xA5}, d.slotSize), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestChunkedDeltaOtherImage: a booted slot whose bytes are not the older image's (one
// byte changed, so its sha256 differs), whatever the journal says of it but that
// image, gets no deltas: the delta file is never fetched, and the install takes
// the chunks it holds and fetches the rest; the slot holds the image.
func TestChunkedDeltaOtherImage(t *testing.T) {
	oldImg, newImg := update(t)
	r := makeRelease(t, oldImg, newImg)
	altered := bytes.Clone(oldImg)
	altered[len(altered)/2] ^= 1
	for name, journal := range map[string]string{"another image": strings.Repeat("e", 64), "unknown (factory)": ""} {
		t.Run(name, func(t *testing.T) {
			d := newChunkSlots(t, len(newImg)+8192, altered)
			s, j := r.serve(t, d, journal)
			p := installDelta(t, j)
			if !bytes.Equal(readFile(t, d.target)[:len(newImg)], newImg) {
				t.Fatal("the slot does not hold the image")
			}
			if n := s.sent["/rel.delta"].Load(); n != 0 || p.Path != ota.PathChunked || p.BytesDelta != 0 || p.BytesReused == 0 {
				t.Fatalf("delta file sent %d bytes; progress %+v", n, p)
			}
		})
	}
}

// TestChunkedDeltaLargerThanSlot: an entry whose older image is larger than the booted
// slot is not looked for (the scan hashes no prefix past the slot's end): no deltas.
func TestChunkedDeltaLargerThanSlot(t *testing.T) {
	oldImg, newImg := update(t)
	r := makeRelease(t, oldImg, newImg)
	d := newChunkSlots(t, len(oldImg), oldImg)
	s, j := r.serve(t, d, "")
	(*j.Chunks.Deltas)[0].FromSize = int64(len(oldImg)) + 1
	p := installDelta(t, j)
	if !bytes.Equal(readFile(t, d.target)[:len(newImg)], newImg) {
		t.Fatal("the slot does not hold the image")
	}
	if n := s.sent["/rel.delta"].Load(); n != 0 || p.Path != ota.PathChunked {
		t.Fatalf("delta file sent %d bytes; progress %+v", n, p)
	}
}
