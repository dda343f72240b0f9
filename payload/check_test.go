package payload

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

func TestCheckStore(t *testing.T) {
	b := build(t, testImage(300<<10+11, 20000, 8), Options{ChunkSize: 16 << 10})
	x := b.parse(t)
	sum := hex.EncodeToString(b.res.ImageSHA256[:])
	flip := func(off int64) []byte {
		s := bytes.Clone(b.store)
		s[off] ^= 1
		return s
	}
	c5 := x.Chunk(5)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		store []byte
		sum   string
		code  ota.Code
		want  string // "" accepts
	}{
		{"intact", nil, b.store, sum, "", ""},
		{"upper-case sha256", nil, b.store, strings.ToUpper(sum), "", ""},
		{"chunk 5 altered", nil, flip(c5.StoreOffset + int64(c5.StoreLength)/2), sum, ota.CodeChunkMismatch, "store.chunk[5]"},
		{"truncated", nil, b.store[:len(b.store)-1], sum, ota.CodeSizeMismatch, "store ends at offset"},
		{"one byte too many", nil, append(bytes.Clone(b.store), 0), sum, ota.CodeSizeMismatch, "longer than"},
		{"another image's sha256", nil, b.store, strings.Repeat("0", 64), ota.CodeHashMismatch, "the manifest says 0000"},
		{"sha256 not hex", nil, b.store, "xyz", "", "not 64 hex digits"},
		{"cancelled", cancelled, b.store, sum, "", "context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			err := CheckStore(ctx, x, bytes.NewReader(tc.store), tc.sum, io.Discard)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || ota.CodeOf(err) != tc.code {
				t.Fatalf("want a %q error mentioning %q, got %v", tc.code, tc.want, err)
			}
		})
	}
}
