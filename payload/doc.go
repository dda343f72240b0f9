// Package payload is the chunked payload format of docs/contract/chunked.md: an index that lists, for
// every fixed-size chunk of an image, the SHA-256 of its bytes and where they lie in a
// store of individually compressed chunks (docs/contract/chunked.md has the byte layout).
//
// Build cuts an image into an index and a store (otactl sign --chunked). ParseIndex reads
// an index defensively against the values of a signed manifest, so that once it returns,
// every chunk is authenticated and every length and offset is in range. A Decoder turns
// one stored chunk back into its bytes in a buffer of at most the chunk size and checks
// its hash before anything is written. Plan decides, without I/O, where each chunk of an
// install comes from (target slot, zeros, booted slot, network) and which store ranges to
// fetch in single-range requests.
//
// Failures are *ota.Error with the docs/contract/installing.md codes index_mismatch and chunk_mismatch,
// whose Field names what was wrong: a manifest field (payload.chunks.size), the index
// (index, index.header.chunk_size, index.chunk[7].length) or a chunk (store.chunk[7]).
package payload
