package slots

import (
	"bytes"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
	"github.com/otad/otad/sha256pair"
)

// With read-back off and pairHash (sha256pair.Fast), the lanes hand raw
// chunks on unchecked and the assembler checks each as it hashes it into
// the image: a chunk that arrives wrong once is fetched again and left out
// of the image's hash; twice, the install fails with chunk_mismatch and
// writes nothing of it. The same without pairHash, where the lanes check.
func TestPairHashChecksRawChunks(t *testing.T) {
	img := rawChunkImage(40, 61)
	modes := []bool{false}
	if sha256pair.Fast() {
		modes = append(modes, true)
	}
	for _, pair := range modes {
		for _, wrong := range []int{1, 2} {
			t.Run(fmt.Sprintf("pair %v, arrives wrong %d times", pair, wrong), func(t *testing.T) {
				c, s, d, job := rig(t, img)
				bc := firstOfKind(t, c.x, 12, payload.KindRaw)
				bad := bc.Num
				corrupt := bytes.Clone(c.store)
				corrupt[bc.StoreOffset+int64(bc.StoreLength)/2] ^= 0x40
				var sent atomic.Int64
				s.setHandler(func(w http.ResponseWriter, r *http.Request, store []byte) {
					var a, b int64
					if _, err := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &a, &b); err == nil &&
						a <= bc.StoreOffset && bc.StoreOffset < b && sent.Add(1) <= int64(wrong) {
						store = corrupt
					}
					http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(store))
				})
				ct := chunkTestTuning()
				ct.pairHash = pair
				err := writeChunked(t.Context(), job, testTuning(), ct)
				if wrong == 1 {
					if err != nil {
						t.Fatal(err)
					}
					checkSlot(t, d.target, img, d.slotSize)
					if n := s.rangesCovering(bad); n != 2 {
						t.Fatalf("chunk %d was in %d requests, want 2 (fetched once more)", bad, n)
					}
					return
				}
				wantCode(t, err, ota.CodeChunkMismatch)
				checkNotCorrupt(t, d, c)
			})
		}
	}
}

// The assembler takes the image's hash only when the network brings at
// least half of what is left to write as raw chunks: an install that mostly
// reuses or decompresses chunks keeps the image's hash a stage of its own.
func TestPairPays(t *testing.T) {
	raw := makeChunked(t, rawChunkImage(40, 71))
	zstd := makeChunked(t, chunkImage(40, 71))
	for _, tc := range []struct {
		name string
		c    *chunked
		in   payload.PlanInput
		want bool
	}{
		{"raw chunks from the network", raw, payload.PlanInput{}, true},
		{"zstd chunks from the network", zstd, payload.PlanInput{}, false},
		{"raw chunks, the booted slot holds them", raw, payload.PlanInput{Booted: holds(raw.x)}, false},
		{"raw chunks, resumed near the end", raw, payload.PlanInput{Next: 38}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := payload.MakePlan(tc.c.x, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := pairPays(p, tc.c.x); got != tc.want {
				t.Fatalf("pairPays = %v, want %v (network %d, booted %d, zero %d bytes)", got, tc.want, p.NetworkBytes, p.BootedBytes, p.ZeroBytes)
			}
		})
	}
}

// holds is a booted slot's list of every chunk of x, where x has it.
func holds(x *payload.Index) *payload.Have {
	h := &payload.Have{}
	for i := range x.Count() {
		c := x.Chunk(i)
		h.Add(c.SHA256, c.Offset)
	}
	return h
}
