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

// TestIndexLayoutMatchesDoc builds the example of docs/contract/chunked.md and checks
// its bytes as the page shows them.
func TestIndexLayoutMatchesDoc(t *testing.T) {
	img := make([]byte, 10000)
	copy(img, text(4096, 0))
	copy(img[8192:], testImage(1808, 1808, 3)) // incompressible
	b := build(t, img, Options{ChunkSize: 4096})
	idx := b.res.Index
	header := []byte{
		0x4f, 0x54, 0x41, 0x44, 0x49, 0x44, 0x58, 0x01, 0x00, 0x10, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
		0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x27, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	}
	if len(idx) != 140 || string(idx[:HeaderSize]) != string(header) {
		t.Fatalf("%d bytes, header % x", len(idx), idx[:HeaderSize])
	}
	if doc := docHeader(t); string(doc) != string(header) {
		t.Fatalf("docs/contract/chunked.md shows the header as % x, the code writes % x", doc, header)
	}
	rec := func(i int) []byte { return idx[HeaderSize+i*RecordSize : HeaderSize+(i+1)*RecordSize] }
	z := zeroSum(4096)
	if rec(0)[35] != 0 || rec(1)[35] != 2 || string(rec(1)[:32]) != string(z[:]) || string(rec(1)[32:35]) != "\x00\x00\x00" {
		t.Errorf("records 0, 1: % x, % x", rec(0)[32:], rec(1))
	}
	if string(rec(2)[32:]) != "\x10\x07\x00\x01" {
		t.Errorf("record 2 ends % x, want 10 07 00 01", rec(2)[32:])
	}
}

// docHeader is the example's header as the hexdump of docs/contract/chunked.md
// shows it: the bytes of its lines 00000000 and 00000010.
func docHeader(t *testing.T) []byte {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("..", "docs", "contract", "chunked.md"))
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	for line := range strings.Lines(string(page)) {
		hexes, ok := strings.CutPrefix(line, "000000")
		if !ok || len(hexes) < 2 || (hexes[:2] != "00" && hexes[:2] != "10") {
			continue
		}
		hexes, _, _ = strings.Cut(hexes[2:], "|")
		for _, f := range strings.Fields(hexes) {
			v, err := strconv.ParseUint(f, 16, 8)
			if err != nil {
				t.Fatalf("hexdump line %q: %v", line, err)
			}
			b = append(b, byte(v))
		}
	}
	return b
}

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
