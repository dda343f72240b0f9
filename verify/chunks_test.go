package verify

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// chunked turns the base manifest into a valid schema-2 one: 256 MiB in 64 KiB chunks.
func chunked(m map[string]any) {
	m["schema"] = 2
	p := payloadOf(m)
	delete(p, "url")
	delete(p, "compression")
	delete(p, "download_size")
	p["chunks"] = map[string]any{
		"size":         65536,
		"count":        4096,
		"index_url":    "https://updates.example.com/rootfs-4.2.0.idx",
		"index_size":   32 + 4096*36,
		"index_sha256": strings.Repeat("AB", 32),
		"store_url":    "https://updates.example.com/rootfs-4.2.0.store",
		"store_size":   91234567,
		"compression":  "zstd",
	}
}

func chunksOf(m map[string]any) map[string]any { return payloadOf(m)["chunks"].(map[string]any) }

// manifestCase is an edit of the base manifest and the field its refusal names.
type manifestCase struct {
	name  string
	edit  func(map[string]any)
	field string // "": accepted
}

// fieldEdits returns edits that make base's manifest, then set or delete a key of the
// object obj picks out of it.
func fieldEdits(base func(map[string]any), obj func(map[string]any) map[string]any) (set func(string, any) func(map[string]any), del func(string) func(map[string]any)) {
	set = func(k string, v any) func(map[string]any) {
		return func(m map[string]any) { base(m); obj(m)[k] = v }
	}
	del = func(k string) func(map[string]any) {
		return func(m map[string]any) { base(m); delete(obj(m), k) }
	}
	return set, del
}

// runManifestCases parses each case's manifest: an accepted one is handed to
// accepted, a refused one must be bad_manifest naming the case's field.
func runManifestCases(t *testing.T, cases []manifestCase, accepted func(*testing.T, *Manifest)) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseManifest(manifestJSON(t, tc.edit))
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				accepted(t, m)
				return
			}
			var e *ota.Error
			if !errors.As(err, &e) || e.Code != ota.CodeBadManifest || e.Field != tc.field {
				t.Fatalf("want bad_manifest at %s, got %v", tc.field, err)
			}
		})
	}
}

func TestParseChunkedManifest(t *testing.T) {
	setC, delC := fieldEdits(chunked, chunksOf)
	runManifestCases(t, []manifestCase{
		{"valid", chunked, ""},
		{"schema-1 fields are ignored", func(m map[string]any) {
			chunked(m)
			payloadOf(m)["url"], payloadOf(m)["compression"], payloadOf(m)["download_size"] = "::", "bzip2", -1
		}, ""},
		{"uncompressed store", setC("compression", "none"), ""},
		{"chunks missing", func(m map[string]any) { chunked(m); delete(payloadOf(m), "chunks") }, "payload.chunks"},
		{"chunks not an object", func(m map[string]any) { chunked(m); payloadOf(m)["chunks"] = 5 }, "payload.chunks"},
		{"size missing", delC("size"), "payload.chunks.size"},
		{"count missing", delC("count"), "payload.chunks.count"},
		{"index_url missing", delC("index_url"), "payload.chunks.index_url"},
		{"index_size missing", delC("index_size"), "payload.chunks.index_size"},
		{"index_sha256 missing", delC("index_sha256"), "payload.chunks.index_sha256"},
		{"store_url missing", delC("store_url"), "payload.chunks.store_url"},
		{"store_size missing", delC("store_size"), "payload.chunks.store_size"},
		{"compression missing", delC("compression"), "payload.chunks.compression"},
		{"index_url empty", setC("index_url", ""), "payload.chunks.index_url"},
		{"index_url without scheme", setC("index_url", "updates.example.com/x.idx"), "payload.chunks.index_url"},
		{"store_url https without host", setC("store_url", "https:///x.store"), "payload.chunks.store_url"},
		{"index_sha256 short", setC("index_sha256", "abcd"), "payload.chunks.index_sha256"},
		{"index_sha256 not hex", setC("index_sha256", strings.Repeat("g", 64)), "payload.chunks.index_sha256"},
		{"size not a power of two", setC("size", 65537), "payload.chunks.size"},
		{"size over 4 MiB", setC("size", 8<<20), "payload.chunks.size"},
		{"size fractional", setC("size", 1.5), "payload.chunks.size"},
		{"count off by one", setC("count", 4097), "payload.chunks.count"},
		{"count overflowing the index size", setC("count", int64(1)<<62), "payload.chunks.count"},
		{"index_size off by one", setC("index_size", 32+4096*36+1), "payload.chunks.index_size"},
		{"store_size negative", setC("store_size", -1), "payload.chunks.store_size"},
		{"compression gzip", setC("compression", "gzip"), "payload.chunks.compression"},
		{"size missing from the payload", func(m map[string]any) { chunked(m); delete(payloadOf(m), "size") }, "payload.size"},
	}, func(t *testing.T, m *Manifest) {
		if m.Schema != 2 || m.Payload.Chunks == nil || m.Payload.URL != "" || m.Payload.Compression != "" || m.Payload.DownloadSize != 0 {
			t.Fatalf("parsed %+v", m.Payload)
		}
	})
}

// TestChunkedManifestRoundTrip: a Manifest with Chunks, marshalled as otactl signs it,
// parses back to itself and gives payload the values to check the index against.
func TestChunkedManifestRoundTrip(t *testing.T) {
	want := Manifest{
		Schema: 2, ID: "r1", Version: "1", Compatible: []string{"c"},
		IssuedAt: testNow, ExpiresAt: testNow.Add(time.Hour),
		Payload: Payload{Size: 10000, SHA256: strings.Repeat("a", 64), Chunks: &Chunks{
			Size: 4096, Count: 3, IndexURL: "https://x/p.idx", IndexSize: 140, IndexSHA256: strings.Repeat("b", 64),
			StoreURL: "https://x/p.store", StoreSize: 5000, Compression: ota.CompressionZstd,
		}},
	}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"url"`) || strings.Contains(string(b), `"compression":""`) {
		t.Fatalf("schema-1 fields in a schema-2 manifest: %s", b)
	}
	m, err := ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if *m.Payload.Chunks != *want.Payload.Chunks {
		t.Fatalf("chunks %+v, want %+v", m.Payload.Chunks, want.Payload.Chunks)
	}
	e := Expect(&m.Payload)
	if e != (payload.Expect{ChunkSize: 4096, ChunkCount: 3, ImageSize: 10000, IndexSize: 140, IndexSHA256: strings.Repeat("b", 64), StoreSize: 5000, Compression: ota.CompressionZstd}) {
		t.Fatalf("Expect %+v", e)
	}
}
