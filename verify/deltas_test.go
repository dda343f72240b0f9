package verify

import (
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// cdcChunked is chunked with content-defined chunks and one deltas entry.
func cdcChunked(m map[string]any) {
	chunked(m)
	c := chunksOf(m)
	c["chunking"], c["count"], c["index_size"] = "cdc", 3000, 120000
	c["deltas"] = []any{map[string]any{
		"from": strings.Repeat("C", 64), "url": "https://updates.example.com/rootfs-4.2.0.from-cccccccccccc.delta",
		"from_size": 200 << 20, "size": 500000, "index_size": 2000, "index_sha256": strings.Repeat("d", 64), "count": 100, "fetch": 700000,
	}}
}

func deltaOf(m map[string]any) map[string]any {
	return chunksOf(m)["deltas"].([]any)[0].(map[string]any)
}

func TestParseDeltasInManifest(t *testing.T) {
	setD, delD := fieldEdits(cdcChunked, deltaOf)
	runManifestCases(t, []manifestCase{
		{"valid", cdcChunked, ""},
		{"no deltas", func(m map[string]any) { cdcChunked(m); delete(chunksOf(m), "deltas") }, ""},
		{"fixed chunking named", func(m map[string]any) { chunked(m); chunksOf(m)["chunking"] = "fixed" }, ""},
		{"unknown chunking", func(m map[string]any) { cdcChunked(m); chunksOf(m)["chunking"] = "rabin" }, "payload.chunks.chunking"},
		{"cdc index larger than a device holds", func(m map[string]any) { cdcChunked(m); chunksOf(m)["count"] = 1 << 20 }, "payload.chunks.count"},
		{"cdc index_size larger than its records", func(m map[string]any) { cdcChunked(m); chunksOf(m)["index_size"] = 1 << 20 }, "payload.chunks.index_size"},
		{"deltas not a list", func(m map[string]any) { cdcChunked(m); chunksOf(m)["deltas"] = 5 }, "payload.chunks.deltas"},
		{"from missing", delD("from"), "payload.chunks.deltas[0].from"},
		{"from not hex", setD("from", "xyz"), "payload.chunks.deltas[0].from"},
		{"from_size missing", delD("from_size"), "payload.chunks.deltas[0].from_size"},
		{"from_size zero", setD("from_size", 0), "payload.chunks.deltas[0].from_size"},
		{"from_size negative", setD("from_size", -4096), "payload.chunks.deltas[0].from_size"},
		{"from_size past any image", setD("from_size", int64(1)<<62+1), "payload.chunks.deltas[0].from_size"},
		{"from_size larger than the new image", setD("from_size", 300<<20), ""},
		{"url missing", delD("url"), "payload.chunks.deltas[0].url"},
		{"url without a scheme", setD("url", "updates.example.com/d"), "payload.chunks.deltas[0].url"},
		{"size missing", delD("size"), "payload.chunks.deltas[0].size"},
		{"size smaller than the index", setD("size", 1999), "payload.chunks.deltas[0].size"},
		{"index_size missing", delD("index_size"), "payload.chunks.deltas[0].index_size"},
		{"index_size zero", setD("index_size", 0), "payload.chunks.deltas[0].index_size"},
		{"index_sha256 short", setD("index_sha256", "ab"), "payload.chunks.deltas[0].index_sha256"},
		{"count zero", setD("count", 0), "payload.chunks.deltas[0].count"},
		{"count past what a device holds", setD("count", 1<<30), "payload.chunks.deltas[0].count"},
		{"fetch negative", setD("fetch", -1), "payload.chunks.deltas[0].fetch"},
		{"fetch missing", delD("fetch"), "payload.chunks.deltas[0].fetch"},
		{"one older image twice", func(m map[string]any) {
			cdcChunked(m)
			d := chunksOf(m)["deltas"].([]any)
			chunksOf(m)["deltas"] = append(d, d[0])
		}, "payload.chunks.deltas[1].from"},
		{"too many entries", func(m map[string]any) {
			cdcChunked(m)
			chunksOf(m)["deltas"] = make([]any, maxDeltas+1)
		}, "payload.chunks.deltas"},
	}, func(t *testing.T, m *Manifest) {
		if m.Payload.Chunks == nil {
			t.Fatal("no chunks")
		}
	})
	m, err := ParseManifest(manifestJSON(t, cdcChunked))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Payload.Chunks
	if c.Chunking != ota.ChunkingCDC || c.DeltaFrom(strings.Repeat("c", 64)) != 0 || c.DeltaFrom(strings.Repeat("e", 64)) != -1 {
		t.Fatalf("chunks %+v", c)
	}
	if e := DeltaExpect(&m.Payload, 0); e.From != strings.Repeat("c", 64) || e.FromSize != 200<<20 || e.Count != 100 || e.Size != 500000 || e.IndexSize != 2000 {
		t.Fatalf("delta expect %+v", e)
	}
	if e := Expect(&m.Payload); e.Chunking != ota.ChunkingCDC || e.ChunkCount != 3000 {
		t.Fatalf("expect %+v", e)
	}
}
