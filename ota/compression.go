package ota

// Compression names how a payload is compressed on the wire.
type Compression string

// The compressions a manifest may name.
const (
	CompressionNone Compression = "none"
	CompressionGzip Compression = "gzip"
	CompressionZstd Compression = "zstd"
	CompressionXZ   Compression = "xz"
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
