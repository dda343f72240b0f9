package ota

// Chunks is payload.chunks of a schema-2 manifest (docs/contract/chunked.md): where the index
// and the store of a chunked payload are, and the values that authenticate the
// index. The manifest parser checks it; the journal keeps it with the install.
type Chunks struct {
	Size        int64       `json:"size"`
	Count       int64       `json:"count"`
	IndexURL    string      `json:"index_url"`
	IndexSize   int64       `json:"index_size"`
	IndexSHA256 string      `json:"index_sha256"`
	StoreURL    string      `json:"store_url"`
	StoreSize   int64       `json:"store_size"`
	Compression Compression `json:"compression"`
	// Chunking is how the image is cut: fixed (index version 1, also when
	// absent) or cdc (index version 2).
	Chunking Chunking `json:"chunking,omitempty"`
	// Deltas are per-chunk deltas against older images: a device whose
	// booted slot holds one of them may fetch its deltas instead of chunks.
	// A pointer keeps Chunks comparable; nil when there are none.
	Deltas *[]Delta `json:"deltas,omitempty"`
}

// DeltaFrom returns the index in Deltas of the entry for the older image whose
// sha256 is image (lowercase hex), or -1.
func (c *Chunks) DeltaFrom(image string) int {
	if c == nil || c.Deltas == nil || image == "" {
		return -1
	}
	for k, d := range *c.Deltas {
		if d.From == image {
			return k
		}
	}
	return -1
}

// Chunking names how a chunked payload's image is cut into chunks.
type Chunking string

// The chunkings a manifest may name; "" is ChunkingFixed.
const (
	ChunkingFixed Chunking = "fixed" // every chunk payload.chunks.size bytes
	ChunkingCDC   Chunking = "cdc"   // content-defined chunks averaging payload.chunks.size bytes
)

// Delta is one entry of payload.chunks.deltas: the deltas of this image's
// chunks against the image whose sha256 is From and size FromSize (a booted
// slot whose first FromSize bytes hash to From holds it), in one file at URL (its
// index, IndexSize bytes hashing to IndexSHA256 and listing Count chunks,
// then the deltas), and Fetch, the bytes a device whose booted slot holds
// From fetches in all when it uses them.
type Delta struct {
	From        string `json:"from"`
	FromSize    int64  `json:"from_size"`
	URL         string `json:"url"`
	Size        int64  `json:"size"`
	IndexSize   int64  `json:"index_size"`
	IndexSHA256 string `json:"index_sha256"`
	Count       int64  `json:"count"`
	Fetch       int64  `json:"fetch"`
	// Placed: the delta index names where the older image holds every chunk it
	// shares at another offset (copy records), so a device holding it reads
	// those ranges instead of scanning its booted slot (docs/contract/chunked.md).
	Placed bool `json:"placed,omitempty"`
}
