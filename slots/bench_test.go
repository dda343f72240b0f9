package slots

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/otad/otad/ota"
)

// BenchmarkWrite streams an image over loopback HTTP into a slot file on the
// test's temporary directory (so on its storage), per compression and with
// and without readback. For 1 GiB against a plain copy use
// `go run ./bench/install -otad bin/otad -inprocess`.
func BenchmarkWrite(b *testing.B) {
	const size = 64 << 20
	img := testImage(size, 42)
	sum := sha(img)
	for _, comp := range []ota.Compression{"none", "zstd", "gzip"} {
		payload := compressed(b, img, comp)
		dir := b.TempDir()
		src := filepath.Join(dir, "payload")
		if err := os.WriteFile(src, payload, 0o600); err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, src) }))
		slot := makeSlot(b, dir, "slot", size)
		for _, readback := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/readback=%v", comp, readback), func(b *testing.B) {
				b.SetBytes(size)
				for b.Loop() {
					if err := Write(b.Context(), Job{URL: srv.URL, Compression: comp, Size: size, SHA256: sum, Target: slot, Readback: readback}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		srv.Close()
	}
}
