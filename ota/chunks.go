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
}
