package ota

// Compression names how a payload is compressed on the wire.
type Compression string

// The compressions a manifest may name.
const (
	CompressionNone Compression = "none"
	CompressionGzip Compression = "gzip"
	CompressionZstd Compression = "zstd"
	CompressionXZ   Compression = "xz"
	// CompressionZstdPrefix is a chunked store's only (payload.chunks.compression,
	// docs/contract/chunked.md): each chunk a zstd frame whose dictionary is the
	// image's bytes before it. Not a stream's: Valid is false for it.
	CompressionZstdPrefix Compression = "zstd-prefix"
)

// Compressions lists every compression, in the order the manifest check names them.
func Compressions() []Compression {
	return []Compression{CompressionNone, CompressionGzip, CompressionZstd, CompressionXZ}
}

// Valid reports whether c is a known compression.
func (c Compression) Valid() bool {
	switch c {
	case CompressionNone, CompressionGzip, CompressionZstd, CompressionXZ:
		return true
	}
	return false
}
