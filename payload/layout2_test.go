package payload

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// layout2Example is the version 2 example of docs/contract/chunked.md: 4 KiB of text,
// 12 KiB of zeros, 4 KiB of random bytes, in chunks of nominal size 4 KiB.
func layout2Example() []byte {
	img := make([]byte, 20480)
	copy(img, text(4096, 0))
	copy(img[16384:], testImage(4096, 4096, 3))
	return img
}

// TestIndex2LayoutMatchesDoc builds the version 2 example of docs/contract/chunked.md
// and checks its decompressed header and records as the page shows them (the lines
// marked v2).
func TestIndex2LayoutMatchesDoc(t *testing.T) {
	b := build(t, layout2Example(), Options{ChunkSize: 4096, Chunking: ota.ChunkingCDC})
	raw, err := decompressExact(b.res.Index, IndexSize2(b.res.ChunkCount))
	if err != nil {
		t.Fatal(err)
	}
	var dump strings.Builder
	for off := 0; off < HeaderSize2; off += 16 {
		dump.WriteString("v2 " + hexLine(off, raw[off:off+16]) + "\n")
	}
	doc := docLines(t, "v2 ")
	if doc != dump.String() {
		t.Fatalf("docs/contract/chunked.md shows the version 2 header as\n%s\nthe code writes\n%s", doc, dump.String())
	}
	var kinds []string
	for i := range int(b.res.ChunkCount) {
		r := getRecord2(raw[HeaderSize2+i*RecordSize2:])
		kinds = append(kinds, r.kind.String()+" "+strconv.FormatUint(r.length, 10))
	}
	if got, want := strings.Join(kinds, ", "), docLines(t, "records: "); got+"\n" != want {
		t.Fatalf("records %q, docs/contract/chunked.md says %q", got, want)
	}
}

func hexLine(off int, b []byte) string {
	var s strings.Builder
	s.WriteString(strings.Repeat("0", 8-len(strconv.FormatInt(int64(off), 16))) + strconv.FormatInt(int64(off), 16) + " ")
	for i, c := range b {
		if i == 8 {
			s.WriteString(" ")
		}
		s.WriteString(" " + string("0123456789abcdef"[c>>4]) + string("0123456789abcdef"[c&15]))
	}
	return s.String()
}

// docLines is the lines of docs/contract/chunked.md that begin with prefix, each
// with its newline (the prefix kept, but for "records: ").
func docLines(t *testing.T, prefix string) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("..", "docs", "contract", "chunked.md"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for line := range strings.Lines(string(page)) {
		if strings.HasPrefix(line, prefix) {
			if prefix == "records: " {
				line = strings.TrimPrefix(line, prefix)
			}
			b.WriteString(line)
		}
	}
	return b.String()
}
