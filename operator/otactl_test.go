package operator

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/otad/otad/internal/testkit/clitest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
	"github.com/ulikunitz/xz"
)

type result struct {
	code           int
	stdout, stderr string
}

func otactl(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// exitCase is a command line and the exit code and stderr it should give.
type exitCase struct {
	name string
	args []string
	code int
	err  string // in stderr
}

// expectExit runs c's command line and checks its exit code and stderr;
// the result is there for further checks.
func expectExit(t *testing.T, c exitCase) result {
	t.Helper()
	r := otactl(t, c.args...)
	if r.code != c.code {
		t.Fatalf("otactl %s: exit %d, want %d\nstderr: %s", strings.Join(c.args, " "), r.code, c.code, r.stderr)
	}
	if !strings.Contains(r.stderr, c.err) {
		t.Errorf("otactl %s: stderr %q lacks %q", strings.Join(c.args, " "), r.stderr, c.err)
	}
	return r
}

func mustRun(t *testing.T, args ...string) result {
	t.Helper()
	r := otactl(t, args...)
	if r.code != ota.ExitOK {
		t.Fatalf("otactl %s: exit %d\nstderr: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r
}

// makeImage writes a test image: random blocks and runs of zeros, like a filesystem.
func makeImage(t *testing.T, path string, size int) []byte {
	t.Helper()
	b := make([]byte, size)
	for off := 0; off < size; off += 128 << 10 {
		end := min(off+64<<10, size)
		if _, err := rand.Read(b[off:end]); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// decoders read each compression back, as a device would.
var decoders = map[string]func(io.Reader) (io.Reader, error){
	"none": func(r io.Reader) (io.Reader, error) { return r, nil },
	"gzip": func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
	"zstd": func(r io.Reader) (io.Reader, error) {
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		return d.IOReadCloser(), err
	},
	"xz": func(r io.Reader) (io.Reader, error) { return xz.NewReader(r) },
}

func decompress(t *testing.T, compression string, r io.Reader) []byte {
	t.Helper()
	dr, err := decoders[compression](r)
	if err != nil {
		t.Fatalf("decompress %s: %v", compression, err)
	}
	if c, ok := dr.(io.Closer); ok {
		defer c.Close()
	}
	b, err := io.ReadAll(dr)
	if err != nil {
		t.Fatalf("decompress %s: %v", compression, err)
	}
	return b
}

func manifestOf(t *testing.T, envelope string) (verify.Manifest, []byte) {
	t.Helper()
	env, err := verify.ParseEnvelope([]byte(envelope))
	if err != nil {
		t.Fatalf("ParseEnvelope: %v", err)
	}
	m, err := verify.ParseManifest(env.Manifest)
	if err != nil {
		t.Fatalf("ParseManifest: %v", err)
	}
	return *m, env.Manifest
}

func TestKeygenSignVerify(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "rootfs.img")
	image := makeImage(t, img, 1<<20+12345) // crosses the 1 MiB copy buffer
	sum := sha256.Sum256(image)
	wantSHA := hex.EncodeToString(sum[:])

	for _, kind := range []string{"ecdsa-p256", "ed25519", "rsa-3072"} {
		name := filepath.Join(dir, kind)
		r := mustRun(t, "keygen", "--type", kind, name)
		if !strings.Contains(r.stdout, "keyid ") {
			t.Errorf("keygen output lacks the keyid: %q", r.stdout)
		}
		st, err := os.Stat(name + ".key")
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s.key mode %v, want 0600", name, st.Mode().Perm())
		}
		if _, err := verify.LoadPrivateKeyFile(name + ".key"); err != nil {
			t.Errorf("key does not load: %v", err)
		}
		if _, err := verify.LoadKeyFile(name + ".pub"); err != nil {
			t.Errorf("pub does not load: %v", err)
		}

		// Every compression once; the pure-Go xz encoder is too slow under -race to repeat per key type.
		comps := []string{"none", "zstd"}
		if kind == "ecdsa-p256" {
			comps = []string{"none", "gzip", "zstd", "xz"}
		}
		for _, comp := range comps {
			t.Run(kind+"/"+comp, func(t *testing.T) {
				out := filepath.Join(dir, kind+"-payload."+comp)
				args := []string{"sign", "--key", name + ".key", "--image", img, "--version", "4.2.0",
					"--compatible", "acme,gw-v2", "--compatible", "acme,gw-v3",
					"--url", "https://updates.example.com/rootfs." + comp, "--security-version", "7",
					"--device", "gw-0001", "--device", "gw-0002", "--expires", "48h"}
				if comp != "none" {
					args = append(args, "--compress", comp, "--out-payload", out)
				}
				r := mustRun(t, args...)
				m, _ := manifestOf(t, r.stdout)
				if m.Payload.SHA256 != wantSHA || m.Payload.Size != int64(len(image)) || m.Payload.Compression != ota.Compression(comp) {
					t.Errorf("payload %+v, want sha %s size %d", m.Payload, wantSHA, len(image))
				}
				if !strings.HasPrefix(m.ID, "4.2.0-") || len(m.ID) != len("4.2.0-")+12 || m.Version != "4.2.0" || m.SecurityVersion != 7 {
					t.Errorf("manifest %+v", m)
				}
				if strings.Join(m.Compatible, " ") != "acme,gw-v2 acme,gw-v3" || strings.Join(m.Devices, " ") != "gw-0001 gw-0002" {
					t.Errorf("compatible %v devices %v", m.Compatible, m.Devices)
				}
				if d := m.ExpiresAt.Sub(m.IssuedAt); d != 48*time.Hour {
					t.Errorf("expires_at - issued_at = %s, want 48h", d)
				}
				if age := time.Since(m.IssuedAt); age < 0 || age > time.Minute {
					t.Errorf("issued_at %s is not now", m.IssuedAt)
				}
				if comp != "none" {
					f, err := os.Open(out)
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					st, _ := f.Stat()
					if m.Payload.DownloadSize != st.Size() {
						t.Errorf("download_size %d, payload file has %d bytes", m.Payload.DownloadSize, st.Size())
					}
					got := sha256.Sum256(decompress(t, comp, f))
					if hex.EncodeToString(got[:]) != m.Payload.SHA256 {
						t.Errorf("decompressed payload does not hash to the manifest's sha256")
					}
					if leftovers, _ := filepath.Glob(filepath.Join(dir, ".*tmp-*")); len(leftovers) > 0 {
						t.Errorf("temporary files left: %v", leftovers)
					}
				} else if m.Payload.DownloadSize != 0 {
					t.Errorf("download_size %d without a payload file", m.Payload.DownloadSize)
				}

				envFile := filepath.Join(dir, kind+"-"+comp+".json")
				if err := os.WriteFile(envFile, []byte(r.stdout), 0o644); err != nil {
					t.Fatal(err)
				}
				payloadFile := out
				if comp == "none" {
					payloadFile = img
				}
				if v := mustRun(t, "verify", "--pub", name+".pub", "--payload", payloadFile, envFile); !strings.Contains(v.stderr, "image size and sha256 OK") {
					t.Errorf("verify --payload %s: %q", payloadFile, v.stderr)
				}
				v := mustRun(t, "verify", "--pub", name+".pub", envFile)
				var printed verify.Manifest
				if err := json.Unmarshal([]byte(v.stdout), &printed); err != nil {
					t.Fatalf("verify output is not the manifest JSON: %v\n%s", err, v.stdout)
				}
				if printed.Payload != m.Payload || printed.ID != m.ID {
					t.Errorf("verify printed %+v, want %+v", printed, m)
				}
			})
		}
	}
}

func TestVerifyRefusals(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	makeImage(t, img, 4096)
	mustRun(t, "keygen", filepath.Join(dir, "a"))
	mustRun(t, "keygen", "--type", "ed25519", filepath.Join(dir, "b"))
	signArgs := []string{"sign", "--image", img, "--version", "1", "--compatible", "c", "--url", "https://h/p"}
	oneSig := mustRun(t, append(signArgs, "--key", filepath.Join(dir, "a.key"))...).stdout
	twoSigs := mustRun(t, append(signArgs, "--key", filepath.Join(dir, "a.key"), "--key", filepath.Join(dir, "b.key"))...).stdout

	// Tamper: change the manifest's version, keep the signature.
	var env map[string]any
	if err := json.Unmarshal([]byte(oneSig), &env); err != nil {
		t.Fatal(err)
	}
	mb, _ := base64.StdEncoding.DecodeString(env["manifest"].(string))
	env["manifest"] = base64.StdEncoding.EncodeToString(bytes.Replace(mb, []byte(`"version":"1"`), []byte(`"version":"2"`), 1))
	tampered, _ := json.Marshal(env)

	files := map[string][]byte{
		"one.json":      []byte(oneSig),
		"two.json":      []byte(twoSigs),
		"tampered.json": tampered,
		"garbage.json":  []byte("{"),
		"huge.json":     bytes.Repeat([]byte(" "), ota.MaxEnvelopeSize+1),
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	tests := []exitCase{
		{"good", []string{"verify", "--pub", p("a.pub"), p("one.json")}, ota.ExitOK, ""},
		{"flags after file", []string{"verify", p("one.json"), "--pub", p("a.pub")}, ota.ExitOK, ""},
		{"tampered", []string{"verify", "--pub", p("a.pub"), p("tampered.json")}, ota.ExitRefused, "bad_signature"},
		{"wrong key", []string{"verify", "--pub", p("b.pub"), p("one.json")}, ota.ExitRefused, "bad_signature"},
		{"threshold 2 met", []string{"verify", "--pub", p("a.pub"), "--pub", p("b.pub"), "--threshold", "2", p("two.json")}, ota.ExitOK, ""},
		{"threshold 2 not met", []string{"verify", "--pub", p("a.pub"), "--pub", p("b.pub"), "--threshold", "2", p("one.json")}, ota.ExitRefused, "bad_signature"},
		{"garbage", []string{"verify", "--pub", p("a.pub"), p("garbage.json")}, ota.ExitRefused, "bad_envelope"},
		{"too large", []string{"verify", "--pub", p("a.pub"), p("huge.json")}, ota.ExitRefused, "too_large"},
		{"missing file", []string{"verify", "--pub", p("a.pub"), p("nope.json")}, ota.ExitFailure, "nope.json"},
		{"bad pub file", []string{"verify", "--pub", p("one.json"), p("one.json")}, ota.ExitFailure, "one.json"},
		{"no pub", []string{"verify", p("one.json")}, ota.ExitUsage, "--pub"},
		{"no file", []string{"verify", "--pub", p("a.pub")}, ota.ExitUsage, "FILE"},
		{"threshold above keys", []string{"verify", "--pub", p("a.pub"), "--threshold", "2", p("one.json")}, ota.ExitUsage, "threshold"},
		{"unknown flag", []string{"verify", "--nope", p("one.json")}, ota.ExitUsage, "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := expectExit(t, tt)
			if tt.code != ota.ExitOK && r.stdout != "" {
				t.Errorf("refused envelope printed %q", r.stdout)
			}
		})
	}
}

func TestSignOptions(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	makeImage(t, img, 1000)
	key := filepath.Join(dir, "k")
	mustRun(t, "keygen", key)
	base := []string{"sign", "--key", key + ".key", "--image", img, "--compatible", "c", "--url", "https://h/p"}

	t.Run("explicit id and issued_at", func(t *testing.T) {
		r := mustRun(t, append(base, "--version", "2", "--id", "rel-7", "--issued-at", "2026-01-02T03:04:05+01:00", "--expires", "87600h")...)
		m, raw := manifestOf(t, r.stdout)
		if m.ID != "rel-7" || !m.IssuedAt.Equal(time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC)) || !m.ExpiresAt.Equal(m.IssuedAt.Add(87600*time.Hour)) {
			t.Errorf("manifest %+v", m)
		}
		if !bytes.Contains(raw, []byte(`"issued_at":"2026-01-02T02:04:05Z"`)) {
			t.Errorf("issued_at not written in UTC: %s", raw)
		}
		if bytes.Contains(raw, []byte(`"devices"`)) {
			t.Errorf("devices written without --device: %s", raw)
		}
	})
	t.Run("id from a version with characters ids forbid", func(t *testing.T) {
		r := mustRun(t, append(base, "--version", "1.0.0+build 5")...)
		m, _ := manifestOf(t, r.stdout)
		if !strings.HasPrefix(m.ID, "1.0.0-build-5-") || len(m.ID) != len("1.0.0-build-5-")+12 {
			t.Errorf("id %q", m.ID)
		}
	})
	t.Run("two signs in one second order", func(t *testing.T) {
		m1, _ := manifestOf(t, mustRun(t, append(base, "--version", "1")...).stdout)
		m2, _ := manifestOf(t, mustRun(t, append(base, "--version", "1")...).stdout)
		if !m2.IssuedAt.After(m1.IssuedAt) {
			t.Errorf("issued_at %s then %s: not increasing", m1.IssuedAt, m2.IssuedAt)
		}
		// Issue 27: the same image signed again is another offer, and its
		// default id says so (the first failed; people read the id).
		if m1.ID == m2.ID || !strings.HasPrefix(m2.ID, "1-") {
			t.Errorf("default ids %q and %q of two signatures", m1.ID, m2.ID)
		}
	})
	t.Run("a summary on stderr, no progress line off a terminal", func(t *testing.T) {
		out := filepath.Join(dir, "summary.img.zst")
		r := mustRun(t, append(base, "--version", "3", "--id", "rel-3", "--compress", "zstd", "--out-payload", out)...)
		st, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("signed rel-3 (version 3, manifest sha256 "+short12(verifyDigest(t, r.stdout))+"): image 0.0 MiB, payload %s (zstd, %s); expires ", mib(st.Size()), out)
		if !strings.HasPrefix(r.stderr, want) || strings.Contains(r.stderr, "\r") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("stderr %q, want one line starting %q", r.stderr, want)
		}
	})
	t.Run("uncompressed copy with --out-payload", func(t *testing.T) {
		out := filepath.Join(dir, "copy.img")
		r := mustRun(t, append(base, "--version", "1", "--out-payload", out)...)
		m, _ := manifestOf(t, r.stdout)
		a, _ := os.ReadFile(img)
		b, _ := os.ReadFile(out)
		if !bytes.Equal(a, b) || m.Payload.DownloadSize != int64(len(a)) {
			t.Errorf("copy differs or download_size %d wrong", m.Payload.DownloadSize)
		}
	})

	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []exitCase{
		{"missing everything", []string{"sign"}, ota.ExitUsage, "missing --key, --image, --version, --compatible, --url"},
		{"compress without out-payload", append(base, "--version", "1", "--compress", "zstd"), ota.ExitUsage, "--out-payload"},
		{"unknown compression", append(base, "--version", "1", "--compress", "lz4", "--out-payload", "x"), ota.ExitUsage, "lz4"},
		{"bad issued-at", append(base, "--version", "1", "--issued-at", "yesterday"), ota.ExitUsage, "--issued-at"},
		{"negative expires", append(base, "--version", "1", "--expires", "-1h"), ota.ExitUsage, "--expires"},
		// Issue 27: every device would refuse it (expired).
		{"expires_at already past", append(base, "--version", "1", "--issued-at", "2026-01-01T00:00:00Z", "--expires", "24h"), ota.ExitUsage,
			"expires_at 2026-01-02T00:00:00Z (--issued-at 2026-01-01T00:00:00Z + --expires 24h0m0s) is already past"},
		{"bad id", append(base, "--version", "1", "--id", "a/b"), ota.ExitUsage, "bad_manifest: id"},
		{"url without scheme", []string{"sign", "--key", key + ".key", "--image", img, "--version", "1", "--compatible", "c", "--url", "h/p"}, ota.ExitUsage, "payload.url"},
		{"url no device fetches", []string{"sign", "--key", key + ".key", "--image", img, "--version", "1", "--compatible", "c", "--url", "ftp://h/p"}, ota.ExitUsage, "url_not_allowed"},
		{"device ID no device has", append(base, "--version", "1", "--device", "gw/1"), ota.ExitUsage, "--device: not a valid name"},
		{"stray argument", append(base, "--version", "1", "extra"), ota.ExitUsage, "extra"},
		{"missing key file", []string{"sign", "--key", filepath.Join(dir, "nokey"), "--image", img, "--version", "1", "--compatible", "c", "--url", "https://h/p"}, ota.ExitFailure, "nokey"},
		{"missing image", []string{"sign", "--key", key + ".key", "--image", filepath.Join(dir, "noimg"), "--version", "1", "--compatible", "c", "--url", "https://h/p"}, ota.ExitFailure, "noimg"},
		{"empty image", []string{"sign", "--key", key + ".key", "--image", empty, "--version", "1", "--compatible", "c", "--url", "https://h/p"}, ota.ExitFailure, "empty"},
		{"public key as signing key", []string{"sign", "--key", key + ".pub", "--image", img, "--version", "1", "--compatible", "c", "--url", "https://h/p"}, ota.ExitFailure, key + ".pub"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := expectExit(t, tt)
			if r.stdout != "" {
				t.Errorf("failed sign printed %q", r.stdout)
			}
		})
	}
}

func TestSignCancelled(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	makeImage(t, img, 1<<20)
	mustRun(t, "keygen", filepath.Join(dir, "k"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	out := filepath.Join(dir, "p.gz")
	code := Run(ctx, []string{"sign", "--key", filepath.Join(dir, "k.key"), "--image", img, "--version", "1",
		"--compatible", "c", "--url", "https://h/p", "--compress", "gzip", "--out-payload", out}, &stdout, &stderr)
	if code != ota.ExitFailure || !strings.Contains(stderr.String(), "context canceled") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 { // img, k.key, k.pub
		t.Errorf("cancelled sign left files: %v", entries)
	}
}

func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "k")
	tests := []exitCase{
		{"no name", []string{"keygen"}, ota.ExitUsage, "NAME"},
		{"two names", []string{"keygen", "a", "b"}, ota.ExitUsage, "NAME"},
		{"bad type", []string{"keygen", "--type", "dsa", name}, ota.ExitUsage, "dsa"},
		{"first", []string{"keygen", name}, ota.ExitOK, ""},
		{"never overwrites", []string{"keygen", "--type", "ed25519", name}, ota.ExitFailure, "already exists"},
		{"missing directory", []string{"keygen", filepath.Join(dir, "no", "k")}, ota.ExitFailure, "no/k.key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := os.ReadFile(name + ".key")
			expectExit(t, tt)
			if after, _ := os.ReadFile(name + ".key"); before != nil && !bytes.Equal(before, after) {
				t.Error("an existing key was overwritten")
			}
		})
	}
}

func TestDispatch(t *testing.T) {
	clitest.Run(t, func(args ...string) (int, string, string) {
		r := otactl(t, args...)
		return r.code, r.stdout, r.stderr
	}, []clitest.Case{
		{Code: ota.ExitUsage, Stderr: "usage: otactl"},
		{Args: []string{"frobnicate"}, Code: ota.ExitUsage, Stderr: `unknown command "frobnicate"`},
		{Args: []string{"help"}, Stdout: "keygen"},
		{Args: []string{"--help"}, Stdout: "verify"},
		{Args: []string{"help", "sign"}, Stdout: "-out-payload"},
		{Args: []string{"help", "frobnicate"}, Code: ota.ExitUsage, Stderr: `unknown command "frobnicate"`},
		{Args: []string{"verify", "-h"}, Stdout: "usage: otactl verify"},
		{Args: []string{"sign", "--help"}, Stdout: "usage: otactl sign"},
		{Args: []string{"rollout", "-h"}, Stdout: "usage: otactl rollout COMMAND"},
		{Args: []string{"rollout", "-h"}, Stdout: "  list "},
		{Args: []string{"help"}, Stdout: "  rollout check "},
		{Args: []string{"help", "rollout", "list"}, Stdout: "usage: otactl rollout list"},
		{Args: []string{"rollout", "frobnicate"}, Code: ota.ExitUsage, Stderr: `otactl rollout: unknown command "frobnicate"`},
		{Args: []string{"help", "rollout"}, Stdout: "  pause "},
		{Args: []string{"rollout", "help"}, Stdout: "  status "},
		{Args: []string{"verify", "--nope"}, Code: ota.ExitUsage, Stderr: "flag provided but not defined: -nope"},
	})
}
