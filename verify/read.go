package verify

import (
	"fmt"
	"io"
	"os"

	"github.com/otad/otad/ota"
)

// ReadEnvelope reads an envelope from r, at most one byte more than an
// envelope may have: an oversized one is then refused (too_large) by
// ParseEnvelope without being read whole. name says where it came from.
func ReadEnvelope(r io.Reader, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, ota.MaxEnvelopeSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// ReadEnvelopeFile is ReadEnvelope of a file; "-" reads standard input.
func ReadEnvelopeFile(file string) ([]byte, error) {
	if file == "-" {
		return ReadEnvelope(os.Stdin, "standard input")
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadEnvelope(f, file)
}
