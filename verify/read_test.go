package verify

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/otad/otad/ota"
)

func TestReadEnvelopeFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		size    int // -1: no file
		wantLen int
		wantErr error
	}{
		{"small", 100, 100, nil},
		{"at the limit", ota.MaxEnvelopeSize, ota.MaxEnvelopeSize, nil},
		{"over the limit: one byte more is enough to refuse it", 3 * ota.MaxEnvelopeSize, ota.MaxEnvelopeSize + 1, nil},
		{"absent", -1, 0, fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "env.json")
			os.Remove(path)
			if tt.size >= 0 {
				if err := os.WriteFile(path, bytes.Repeat([]byte(" "), tt.size), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			b, err := ReadEnvelopeFile(path)
			if !errors.Is(err, tt.wantErr) || len(b) != tt.wantLen {
				t.Fatalf("%d bytes, err %v; want %d, %v", len(b), err, tt.wantLen, tt.wantErr)
			}
		})
	}
}
