package node

import (
	"errors"
	"testing"

	"github.com/otad/otad/ota"
)

// Issue 27: an error of a given payload names the file as the person gave
// it (docs/contract/commands.md), whatever the fetch called it: a passed
// descriptor, an absolute file URL, or nothing at all (an index or a chunk).
func TestSourceNamed(t *testing.T) {
	idx, store := "file:///proc/self/fd/7", "file:///abs/usb/c.store"
	chunked := Source{IndexURL: idx, StoreURL: store, Names: map[string]string{idx: "usb/c.idx", store: "usb/c.store"}}
	stream := Source{URL: "file:///tmp/x/trunc.img", Names: map[string]string{"file:///tmp/x/trunc.img": "trunc.img"}}
	tests := []struct {
		name string
		src  Source
		err  error
		want string
	}{
		{"a store of another size", chunked, ota.Errorf(ota.CodeSizeMismatch, "store %s is 1 bytes, payload.chunks.store_size says 2", store),
			"size_mismatch: store usb/c.store is 1 bytes, payload.chunks.store_size says 2"},
		{"an index that does not match", chunked, ota.FieldErrorf(ota.CodeIndexMismatch, "index", "3271 bytes, payload.chunks.index_size says 3178"),
			"index_mismatch: usb/c.idx: index: 3271 bytes, payload.chunks.index_size says 3178"},
		{"a chunk that does not match", chunked, ota.FieldErrorf(ota.CodeChunkMismatch, "store.chunk[0]", "sha256 aa, index says bb"),
			"chunk_mismatch: usb/c.store: store.chunk[0]: sha256 aa, index says bb"},
		{"a stream cut short, by its path", stream, ota.Errorf(ota.CodeSizeMismatch, "payload /tmp/x/trunc.img ends after 2 bytes"),
			"size_mismatch: payload trunc.img ends after 2 bytes"},
		{"a URL given as it is", Source{IndexURL: "http://h/c.idx", StoreURL: "http://h/c.store"}, ota.FieldErrorf(ota.CodeIndexMismatch, "index", "short"),
			"index_mismatch: http://h/c.idx: index: short"},
		{"no code: write_failed", stream, errors.New("open /tmp/x/trunc.img: denied"), "write_failed: open trunc.img: denied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.src.named(tc.err)
			if got.Error() != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if ota.CodeOf(got) != ota.CodeOf(tc.err) && ota.CodeOf(tc.err) != "" {
				t.Errorf("code %s, want %s", ota.CodeOf(got), ota.CodeOf(tc.err))
			}
		})
	}
}
