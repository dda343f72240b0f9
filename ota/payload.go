package ota

// Payload describes an image as the signed manifest does
// (docs/contract/formats.md): Size and SHA256 are of the decompressed bytes
// that land in the slot. A schema-1 payload is one stream at URL, compressed
// with Compression; DownloadSize, when set, bounds the bytes fetched. A
// schema-2 payload is chunked: Chunks replaces URL, Compression and
// DownloadSize (docs/contract/chunked.md). The manifest parser checks it,
// the journal keeps it with the install, the slot writer installs it.
type Payload struct {
	URL          string      `json:"url,omitempty"`
	Compression  Compression `json:"compression,omitempty"`
	Size         int64       `json:"size"`
	SHA256       string      `json:"sha256"`
	DownloadSize int64       `json:"download_size,omitempty"`
	Chunks       *Chunks     `json:"chunks,omitempty"`
}
