package payload

import (
	"fmt"

	"github.com/otad/otad/ota"
)

// indexErr is an index_mismatch naming what is at fault: a manifest field
// (payload.chunks.size), the index as a whole (index), a header field
// (index.header.chunk_size) or a field of one chunk's record (index.chunk[7].length).
func indexErr(field, format string, args ...any) *ota.Error {
	return ota.FieldErrorf(ota.CodeIndexMismatch, field, format, args...)
}

// chunkErr is a chunk_mismatch for chunk i of the store.
func chunkErr(i int, format string, args ...any) *ota.Error {
	return ota.FieldErrorf(ota.CodeChunkMismatch, fmt.Sprintf("store.chunk[%d]", i), format, args...)
}
