package slots

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
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
					if err := Write(b.Context(), Job{Payload: ota.Payload{URL: srv.URL, Compression: comp, Size: size, SHA256: sum}, Target: File(slot), Readback: readback}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		srv.Close()
	}
}

// BenchmarkWriteChunked installs a chunked payload (64 KiB chunks, fixed and
// content-defined) of an
// incompressible image with nothing to reuse, beside the stream install of
// the same image (compression none), both from files over loopback HTTP
// into a fresh file of allocated, unwritten blocks, as installbench does:
// what a sync costs depends on it.
func BenchmarkWriteChunked(b *testing.B) {
	const size = 128 << 20
	img := make([]byte, size)
	rand.NewChaCha8([32]byte{7}).Read(img)
	var store bytes.Buffer
	res, err := payload.Build(b.Context(), bytes.NewReader(img), &store, payload.Options{Level: 1})
	if err != nil {
		b.Fatal(err)
	}
	var cdcStore bytes.Buffer
	cdc, err := payload.Build(b.Context(), bytes.NewReader(img), &cdcStore, payload.Options{Level: 1, Chunking: ota.ChunkingCDC})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	for name, data := range map[string][]byte{"img": img, "img.idx": res.Index, "img.store": store.Bytes(), "cdc.idx": cdc.Index, "cdc.store": cdcStore.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	slot := filepath.Join(dir, "slot")
	fresh := func(b *testing.B) {
		b.StopTimer()
		defer b.StartTimer()
		os.Remove(slot)
		f, err := os.Create(slot)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
			b.Skipf("fallocate: %v", err)
		}
		unix.Sync()
	}
	b.Run("stream", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			fresh(b)
			c0 := cpuNow()
			if err := Write(b.Context(), Job{Payload: ota.Payload{URL: srv.URL + "/img", Compression: "none", Size: size, SHA256: sha(img)}, Target: File(slot)}); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpuNow()-c0)/1e6, "cpu-ms/op")
		}
	})
	for _, c := range []struct {
		name, file string
		res        *payload.Result
	}{{"chunked", "img", res}, {"chunked-cdc", "cdc", cdc}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				fresh(b)
				job := ChunkedJob{Job: Job{Payload: ota.Payload{URL: srv.URL + "/" + c.file + ".store", Size: size, SHA256: sha(img)}, Target: File(slot)},
					IndexURL: srv.URL + "/" + c.file + ".idx", Expect: c.res.Expect(), Offer: "bench", StateDir: b.TempDir()}
				c0 := cpuNow()
				if err := WriteChunked(b.Context(), job); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(cpuNow()-c0)/1e6, "cpu-ms/op")
			}
		})
	}
}

func cpuNow() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
