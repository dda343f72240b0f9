package operator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
	"github.com/otad/otad/verify"
)

// chunkedSetup makes a key and a 1 MiB + 1234 byte image in a fresh directory.
func chunkedSetup(t *testing.T) (dir, img string, image []byte, signArgs []string) {
	t.Helper()
	dir = t.TempDir()
	img = filepath.Join(dir, "rootfs.img")
	image = makeImage(t, img, 1<<20+1234)
	mustRun(t, "keygen", filepath.Join(dir, "k"))
	return dir, img, image, []string{"sign", "--key", filepath.Join(dir, "k.key"), "--image", img, "--version", "4.2.0",
		"--compatible", "acme,gw-v2", "--url", "https://updates.example.com/rootfs-4.2.0", "--chunked"}
}

// TestSignChunked: sign --chunked writes PATH.idx and PATH.store that a device would
// accept and that decode to the image; verify --payload agrees.
func TestSignChunked(t *testing.T) {
	dir, _, image, signArgs := chunkedSetup(t)
	for _, tc := range []struct {
		name      string
		flags     []string
		chunkSize int64
		comp      ota.Compression
	}{
		{"defaults", nil, 64 << 10, ota.CompressionZstdPrefix},
		{"16KiB chunks", []string{"--chunk-size", "16KiB"}, 16 << 10, ota.CompressionZstdPrefix},
		{"zstd for older devices", []string{"--compress", "zstd"}, 64 << 10, ota.CompressionZstd},
		{"fixed chunks: zstd", []string{"--chunking", "fixed"}, 64 << 10, ota.CompressionZstd},
		{"uncompressed store", []string{"--compress", "none", "--chunk-size", "4096"}, 4096, ota.CompressionNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			r := mustRun(t, append(append(signArgs, "--out-payload", out), tc.flags...)...)
			if !strings.Contains(r.stderr, out+".idx: ") {
				t.Errorf("no summary on stderr: %q", r.stderr)
			}
			m, _ := manifestOf(t, r.stdout)
			c := m.Payload.Chunks
			sum := sha256.Sum256(image)
			if m.Schema != 2 || c == nil || m.Payload.SHA256 != hex.EncodeToString(sum[:]) || m.Payload.Size != int64(len(image)) || m.Payload.URL != "" {
				t.Fatalf("manifest %+v", m)
			}
			if c.IndexURL != "https://updates.example.com/rootfs-4.2.0.idx" || c.StoreURL != "https://updates.example.com/rootfs-4.2.0.store" ||
				c.Size != tc.chunkSize || c.Compression != tc.comp {
				t.Fatalf("chunks %+v", c)
			}
			for _, f := range []struct {
				ext  string
				size int64
			}{{".idx", c.IndexSize}, {".store", c.StoreSize}} {
				st, err := os.Stat(out + f.ext)
				if err != nil || st.Size() != f.size || st.Mode().Perm() != 0o644 {
					t.Fatalf("%s%s: %v, want %d bytes, mode 0644", out, f.ext, err, f.size)
				}
			}
			if got := decodeAll(t, &m.Payload, out); !bytes.Equal(got, image) {
				t.Fatal("the chunks do not make the image")
			}
			// A device that installs chunked payloads accepts the offer.
			pub, err := verify.LoadKeyFile(filepath.Join(dir, "k.pub"))
			if err != nil {
				t.Fatal(err)
			}
			policy := verify.Policy{Compatible: "acme,gw-v2", Chunked: true}
			if _, err := verify.Check([]byte(r.stdout), verify.NewKeyring(pub), policy, verify.Facts{Now: time.Now()}); err != nil {
				t.Fatalf("device check: %v", err)
			}
			v := mustRun(t, "verify", "--pub", filepath.Join(dir, "k.pub"), "--payload", out, writeEnvelope(t, dir, r.stdout))
			if !strings.Contains(v.stderr, "chunks OK, image sha256 OK") {
				t.Errorf("verify --payload said %q", v.stderr)
			}
		})
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

// decodeAll reads out.idx and out.store the way a device does and returns the image.
func decodeAll(t *testing.T, p *verify.Payload, out string) []byte {
	t.Helper()
	idx, err := os.ReadFile(out + ".idx")
	if err != nil {
		t.Fatal(err)
	}
	x, err := payload.ParseIndex(idx, verify.Expect(p))
	if err != nil {
		t.Fatal(err)
	}
	store, err := os.Open(out + ".store")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var img bytes.Buffer
	if err := payload.CheckStore(t.Context(), x, store, p.SHA256, &img); err != nil {
		t.Fatal(err)
	}
	return img.Bytes()
}

func writeEnvelope(t *testing.T, dir, env string) string {
	t.Helper()
	p := filepath.Join(dir, "offer.json")
	if err := os.WriteFile(p, []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestVerifyChunkedRefusals: verify --payload refuses files that do not match the
// envelope, with the code a device would give.
func TestVerifyChunkedRefusals(t *testing.T) {
	dir, img, _, signArgs := chunkedSetup(t)
	out := filepath.Join(dir, "p")
	r := mustRun(t, append(signArgs, "--out-payload", out, "--chunk-size", "16KiB")...)
	env := writeEnvelope(t, dir, r.stdout)
	schema1 := writeEnvelope(t, t.TempDir(), mustRun(t, "sign", "--key", filepath.Join(dir, "k.key"), "--image", img,
		"--version", "1", "--compatible", "c", "--url", "https://h/p").stdout)
	idx, _ := os.ReadFile(out + ".idx")
	store, _ := os.ReadFile(out + ".store")
	flip := func(b []byte, off int) []byte {
		b = bytes.Clone(b)
		b[off] ^= 1
		return b
	}
	for _, tc := range []struct {
		name       string
		idx, store []byte // nil: as signed; files are rewritten per case
		env        string
		code       int
		want       string
	}{
		{"chunk altered in the store", nil, flip(store, len(store)/2), env, ota.ExitRefused, "chunk_mismatch"},
		{"store truncated", nil, store[:len(store)-1], env, ota.ExitRefused, "size_mismatch"},
		{"store longer", nil, append(bytes.Clone(store), 0), env, ota.ExitRefused, "size_mismatch"},
		{"index altered", flip(idx, 40), nil, env, ota.ExitRefused, "index_mismatch: index: sha256"},
		{"index truncated", idx[:len(idx)-1], nil, env, ota.ExitRefused, "index_mismatch"},
		{"schema-1 envelope: the chunked files are not its payload", nil, nil, schema1, ota.ExitFailure, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range []struct {
				ext       string
				got, orig []byte
			}{{".idx", tc.idx, idx}, {".store", tc.store, store}} {
				b := f.got
				if b == nil {
					b = f.orig
				}
				if err := os.WriteFile(out+f.ext, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			v := otactl(t, "verify", "--pub", filepath.Join(dir, "k.pub"), "--payload", out, tc.env)
			if v.code != tc.code || !strings.Contains(v.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", v.code, v.stderr, tc.code, tc.want)
			}
		})
	}
	if err := os.Remove(out + ".store"); err != nil {
		t.Fatal(err)
	}
	if v := otactl(t, "verify", "--pub", filepath.Join(dir, "k.pub"), "--payload", out, env); v.code != ota.ExitFailure || !strings.Contains(v.stderr, "p.store") {
		t.Fatalf("missing store: exit %d, %q", v.code, v.stderr)
	}
}

func TestSignChunkedOptions(t *testing.T) {
	dir, _, _, signArgs := chunkedSetup(t)
	out := filepath.Join(dir, "p")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no out-payload", signArgs, "--chunked needs --out-payload"},
		{"chunk size not a power of two", append(signArgs, "--out-payload", out, "--chunk-size", "5000"), "--chunk-size 5000"},
		{"chunk size too small", append(signArgs, "--out-payload", out, "--chunk-size", "2KiB"), "from 4KiB to 4MiB"},
		{"chunk size too large", append(signArgs, "--out-payload", out, "--chunk-size", "8MiB"), "from 4KiB to 4MiB"},
		{"chunk size unparsable", append(signArgs, "--out-payload", out, "--chunk-size", "64KB"), "--chunk-size"},
		{"gzip store", append(signArgs, "--out-payload", out, "--compress", "gzip"), "want zstd-prefix, zstd or none"},
		{"zstd-prefix of fixed chunks", append(signArgs, "--out-payload", out, "--compress", "zstd-prefix", "--chunking", "fixed"), "zstd-prefix needs --chunking cdc"},
		{"zstd-prefix stream", append(signArgs[:len(signArgs)-1], "--out-payload", out, "--compress", "zstd-prefix"), "zstd-prefix needs --chunked"},
		{"chunk size without chunked", append(signArgs[:len(signArgs)-1], "--chunk-size", "16KiB"), "--chunk-size needs --chunked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := otactl(t, tc.args...)
			if r.code != ota.ExitUsage || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q", r.code, r.stderr, r.stdout)
			}
		})
	}
	if files, _ := filepath.Glob(out + "*"); len(files) > 0 {
		t.Errorf("refused signs wrote %v", files)
	}
}

func TestSignChunkedCancelled(t *testing.T) {
	dir, _, _, signArgs := chunkedSetup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	code := Run(ctx, append(signArgs, "--out-payload", filepath.Join(dir, "p")), &stdout, &stderr)
	if code != ota.ExitFailure || !strings.Contains(stderr.String(), "context canceled") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 { // rootfs.img, k.key, k.pub
		t.Errorf("cancelled sign left files: %v", entries)
	}
}

// TestSignChunkedIndexTooLarge: an image whose index would be larger than a device
// holds (1 GiB in 4 KiB chunks) is refused before anything is written, naming the
// way out.
func TestSignChunkedIndexTooLarge(t *testing.T) {
	dir, img, _, signArgs := chunkedSetup(t)
	if err := os.Truncate(img, 1<<30); err != nil { // sparse: nothing is read
		t.Fatal(err)
	}
	out := filepath.Join(dir, "p")
	r := otactl(t, append(signArgs, "--out-payload", out, "--chunk-size", "4KiB")...)
	if r.code != ota.ExitFailure || !strings.Contains(r.stderr, "use a larger --chunk-size") || r.stdout != "" {
		t.Fatalf("exit %d, stderr %q, stdout %q", r.code, r.stderr, r.stdout)
	}
	if files, _ := filepath.Glob(out + "*"); len(files) > 0 {
		t.Errorf("refused sign wrote %v", files)
	}
}

// TestVerifyStreamRefusals: verify --payload checks a stream payload file as
// a device would, with the device's codes (exit 3).
func TestVerifyStreamRefusals(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, "keygen", filepath.Join(dir, "k"))
	img := filepath.Join(dir, "img")
	image := bytes.Repeat([]byte("otad stream payload "), 20000)
	if err := os.WriteFile(img, image, 0o644); err != nil {
		t.Fatal(err)
	}
	gz := filepath.Join(dir, "img.gz")
	sign := func(args ...string) string {
		return writeEnvelope(t, t.TempDir(), mustRun(t, append([]string{"sign", "--key", filepath.Join(dir, "k.key"), "--image", img,
			"--version", "1", "--compatible", "c", "--url", "https://h/p"}, args...)...).stdout)
	}
	plain, packed := sign(), sign("--compress", "gzip", "--out-payload", gz)
	gzBytes, _ := os.ReadFile(gz)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	altered := bytes.Clone(image)
	altered[len(altered)/2] ^= 1
	badGz := bytes.Clone(gzBytes)
	badGz[len(badGz)-6] ^= 1 // in the trailer's CRC
	for _, tc := range []struct {
		name, env, file, want string
	}{
		{"altered", plain, write("altered", altered), "hash_mismatch"},
		{"truncated", plain, write("short", image[:len(image)-1]), "size_mismatch"},
		{"longer", plain, write("long", append(bytes.Clone(image), 0)), "size_mismatch"},
		{"gzip not the download_size", packed, write("gz-long", append(bytes.Clone(gzBytes), 0)), "size_mismatch"},
		{"gzip corrupt", packed, write("gz-bad", badGz), "download_failed"},
		{"not gzip", packed, write("gz-plain", image[:len(gzBytes)]), "download_failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := otactl(t, "verify", "--pub", filepath.Join(dir, "k.pub"), "--payload", tc.file, tc.env)
			if v.code != ota.ExitRefused || !strings.Contains(v.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 3 mentioning %q", v.code, v.stderr, tc.want)
			}
		})
	}
	if v := otactl(t, "verify", "--pub", filepath.Join(dir, "k.pub"), "--payload", gz, packed); v.code != 0 || !strings.Contains(v.stderr, "image size and sha256 OK") {
		t.Fatalf("the signed gzip file: exit %d %q", v.code, v.stderr)
	}
}
