package operator

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
	"github.com/otad/otad/verify"
)

// updatePair writes an older image and a newer one: the same blocks, some moved by a
// few KiB (bytes inserted before them), some changed in a few bytes.
func updatePair(t *testing.T, dir string) (oldPath, newPath string, oldImg, newImg []byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	oldImg = make([]byte, 3<<20)
	for i := 0; i < len(oldImg); i += 8 {
		v := rng.Uint64() & 0x3f3f3f3f3f3f3f3f // compressible a little
		for j := range 8 {
			oldImg[i+j] = byte(v >> (8 * j))
		}
	}
	newImg = append(bytes.Clone(oldImg[:1<<20]), bytes.Repeat([]byte("moved by a few KiB "), 300)...)
	newImg = append(newImg, oldImg[1<<20:]...)
	for _, off := range []int{100000, 2 << 20, 3<<20 - 5000} {
		newImg[off] ^= 0xff
	}
	oldPath, newPath = filepath.Join(dir, "old.img"), filepath.Join(dir, "new.img")
	for p, b := range map[string][]byte{oldPath: oldImg, newPath: newImg} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return oldPath, newPath, oldImg, newImg
}

// TestSignDeltaFrom: --delta-from writes a delta file per older image, lists it in the
// manifest with what a device holding that image fetches, says so against the full
// stream, and the deltas rebuild the chunks from the older image's bytes.
func TestSignDeltaFrom(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath, oldImg, newImg := updatePair(t, dir)
	other := filepath.Join(dir, "other.img")
	makeImage(t, other, 1<<20)
	mustRun(t, "keygen", filepath.Join(dir, "k"))
	out := filepath.Join(dir, "rel")
	r := mustRun(t, "sign", "--key", filepath.Join(dir, "k.key"), "--image", newPath, "--version", "2", "--compatible", "c",
		"--url", "https://updates.example.com/rel", "--chunked", "--delta-from", oldPath+","+other, "--delta-from", newPath, "--out-payload", out,
		// zstd-prefix chunks are smaller: the 1 MiB other image then makes a
		// delta file of one chunk, 4 bytes to the good. The deltas are tested here.
		"--compress", "zstd")
	m, _ := manifestOf(t, r.stdout)
	c := m.Payload.Chunks
	if c.Chunking != ota.ChunkingCDC || c.Deltas == nil || len(*c.Deltas) != 1 {
		t.Fatalf("chunks %+v, stderr %s", c, r.stderr)
	}
	d := (*c.Deltas)[0]
	name := out + ".from-" + d.From[:12] + ".delta"
	if want := sha(oldImg); d.From != want || d.URL != "https://updates.example.com/rel.from-"+d.From[:12]+".delta" {
		t.Fatalf("delta entry %+v, want from %s", d, want)
	}
	for _, want := range []string{name + ": ", "a device holding it fetches", "of the full stream", "--delta-from " + other + " (sha256 ", "none written", "--delta-from " + newPath + " (sha256 " + sha(newImg)[:12] + "…, ", "the image itself"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not say %q: %s", want, r.stderr)
		}
	}
	full := c.IndexSize + c.StoreSize
	if d.Fetch >= full/4 {
		t.Errorf("a device holding the older image fetches %d bytes of a %d-byte chunked payload", d.Fetch, full)
	}
	file := checkDeltaOf(t, &m.Payload, 0, out, oldImg, newImg)
	v := mustRun(t, "verify", "--pub", filepath.Join(dir, "k.pub"), "--payload", out, writeEnvelope(t, dir, r.stdout))
	if !strings.Contains(v.stderr, "chunks OK, image sha256 OK") {
		t.Errorf("verify --payload said %q", v.stderr)
	}
	file[len(file)-1] ^= 1 // a delta: only the device, with the older image, can tell
	file[10] ^= 1          // the delta index: verify tells
	os.WriteFile(name, file, 0o644)
	if v := otactl(t, "verify", "--pub", filepath.Join(dir, "k.pub"), "--payload", out, writeEnvelope(t, dir, r.stdout)); v.code != ota.ExitRefused || !strings.Contains(v.stderr, "payload.chunks.deltas[0].index") {
		t.Fatalf("altered delta index: exit %d, %q", v.code, v.stderr)
	}
}

// checkDeltaOf checks the delta file of entry k as a device holding oldImg would use
// it: its size, its index, and every delta rebuilding its chunk of newImg. It returns
// the file.
func checkDeltaOf(t *testing.T, p *verify.Payload, k int, out string, oldImg, newImg []byte) []byte {
	t.Helper()
	d := (*p.Chunks.Deltas)[k]
	name := out + ".from-" + d.From[:12] + ".delta"
	file, err := os.ReadFile(name)
	if err != nil || int64(len(file)) != d.Size || d.FromSize != int64(len(oldImg)) || d.From != sha(oldImg) {
		t.Fatalf("%s: %d bytes (%v), entry %+v, for an older image of %d bytes", name, len(file), err, d, len(oldImg))
	}
	idx, _ := os.ReadFile(out + ".idx")
	x, err := payload.ParseIndex(idx, verify.Expect(p))
	if err != nil {
		t.Fatal(err)
	}
	dl, err := payload.ParseDelta(file[:d.IndexSize], verify.DeltaExpect(p, k), x, "delta")
	if err != nil {
		t.Fatal(err)
	}
	dec, err := payload.NewDeltaDecoder(x)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	for j := range dl.Count() {
		dc := dl.At(j)
		got, err := dec.Decode(dc, file[dc.Offset:dc.Offset+int64(dc.Length)], bytes.NewReader(oldImg))
		ch := x.Chunk(dc.Chunk)
		if err != nil || !bytes.Equal(got, newImg[ch.Offset:ch.Offset+int64(ch.Length)]) {
			t.Fatalf("%s: delta %d: %v", name, j, err)
		}
	}
	return file
}

// TestSignDeltaFromSizes: an older image larger or smaller than the new one, and two
// older images at once, each get their delta file and entry, with the older image's
// sha256 and size (from_size), in the order given; the manifest passes the offer
// checks of a device whose slot holds the larger image, and each file rebuilds its
// chunks from its own older image.
func TestSignDeltaFromSizes(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath, oldImg, newImg := updatePair(t, dir)
	old2Path, old2 := secondOlder(t, dir, oldImg)
	mustRun(t, "keygen", filepath.Join(dir, "k"))
	for _, tc := range []struct {
		name  string
		image string
		olds  []string
		img   []byte
		want  [][]byte
	}{
		{"older smaller", newPath, []string{oldPath}, newImg, [][]byte{oldImg}},
		{"older larger", oldPath, []string{newPath}, oldImg, [][]byte{newImg}},
		{"two older images", newPath, []string{oldPath, old2Path}, newImg, [][]byte{oldImg, old2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "rel")
			r := mustRun(t, "sign", "--key", filepath.Join(dir, "k.key"), "--image", tc.image, "--version", "2", "--compatible", "c",
				"--url", "https://updates.example.com/rel", "--chunked", "--delta-from", strings.Join(tc.olds, ","), "--out-payload", out)
			m, _ := manifestOf(t, r.stdout)
			c := m.Payload.Chunks
			if c.Deltas == nil || len(*c.Deltas) != len(tc.want) {
				t.Fatalf("deltas %+v; stderr %s", c.Deltas, r.stderr)
			}
			for k, old := range tc.want {
				checkDeltaOf(t, &m.Payload, k, out, old, tc.img)
				if d := (*c.Deltas)[k]; !strings.Contains(r.stderr, fmt.Sprintf("from %s (sha256 %s…, %d bytes)", tc.olds[k], d.From[:12], len(old))) || d.Fetch >= c.IndexSize+c.StoreSize {
					t.Errorf("entry %+v; stderr %s", d, r.stderr)
				}
			}
			slot := int64(max(len(oldImg), len(newImg)))
			key, err := verify.LoadKeyFile(filepath.Join(dir, "k.pub"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := verify.Check([]byte(r.stdout), verify.NewKeyring(key), verify.Policy{Compatible: "c", Chunked: true},
				verify.Facts{Now: m.IssuedAt, InactiveSlotSize: slot}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSignDeltaFromRefusals: wrong flags, and each --delta-from file that is not an
// older image (missing, empty, a directory), are refused before the chunked payload
// is built, naming the flag and the file; nothing is written.
func TestSignDeltaFromRefusals(t *testing.T) {
	dir, img, _, signArgs := chunkedSetup(t)
	empty, sub := filepath.Join(dir, "empty.img"), filepath.Join(dir, "sub")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "p")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"without chunked", append(signArgs[:len(signArgs)-1], "--delta-from", img), ota.ExitUsage, "--delta-from needs --chunked"},
		{"chunking unknown", append(signArgs, "--out-payload", filepath.Join(dir, "p"), "--chunking", "rabin"), ota.ExitUsage, "--chunking"},
		{"older image missing", append(signArgs, "--out-payload", out, "--delta-from", filepath.Join(dir, "nope.img")), ota.ExitFailure,
			"--delta-from " + filepath.Join(dir, "nope.img") + ": no such file"},
		{"older image empty", append(signArgs, "--out-payload", out, "--delta-from", img+","+empty), ota.ExitFailure,
			"--delta-from " + empty + ": an empty file"},
		{"older image a directory", append(signArgs, "--out-payload", out, "--delta-from", sub), ota.ExitFailure,
			"--delta-from " + sub + ": a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := otactl(t, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			// Refused before the payload is built: nothing said as written.
			if strings.Contains(r.stderr, "<nil>") || strings.Contains(r.stderr, ".idx:") {
				t.Fatalf("stderr %q", r.stderr)
			}
		})
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "p*")); len(files) > 0 {
		t.Errorf("refused signs wrote %v", files)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(files) > 0 {
		t.Errorf("temporary files left: %v", files)
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestVerifyDeltaFiles: verify --payload says of each delta file it checked the
// file, its size, its entry and the older image it is keyed to; a missing one
// fails as a missing index or store does (exit 1), naming the path it looked for
// and the entry, and a delta file that does not match its entry is refused as a
// device would refuse it (exit 3).
func TestVerifyDeltaFiles(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath, oldImg, _ := updatePair(t, dir)
	old2Path, _ := secondOlder(t, dir, oldImg)
	mustRun(t, "keygen", filepath.Join(dir, "k"))
	out := filepath.Join(dir, "rel")
	r := mustRun(t, "sign", "--key", filepath.Join(dir, "k.key"), "--image", newPath, "--version", "2", "--compatible", "c",
		"--url", "https://updates.example.com/rel", "--chunked", "--delta-from", oldPath+","+old2Path, "--out-payload", out)
	m, _ := manifestOf(t, r.stdout)
	if m.Payload.Chunks.Deltas == nil || len(*m.Payload.Chunks.Deltas) != 2 {
		t.Fatalf("deltas %+v; stderr %s", m.Payload.Chunks.Deltas, r.stderr)
	}
	deltas := *m.Payload.Chunks.Deltas
	env := writeEnvelope(t, dir, r.stdout)
	verifyArgs := []string{"verify", "--pub", filepath.Join(dir, "k.pub"), "--payload", out, env}
	name := func(k int) string { return out + ".from-" + deltas[k].From[:12] + ".delta" }

	v := mustRun(t, verifyArgs...)
	lines := strings.Split(strings.TrimSuffix(v.stderr, "\n"), "\n")
	if len(lines) != 4 || !strings.HasSuffix(lines[1], "image sha256 OK") {
		t.Fatalf("verify --payload said %q; want the envelope's line, the index and store's, and one per delta file", v.stderr)
	}
	for k, d := range deltas {
		want := fmt.Sprintf("%s: payload.chunks.deltas[%d], from sha256 %s… (%d bytes): %d bytes OK, delta index OK (%d records)",
			name(k), k, d.From[:12], d.FromSize, d.Size, d.Count)
		if lines[2+k] != want {
			t.Errorf("delta %d: verify said\n%q\nwant\n%q", k, lines[2+k], want)
		}
	}

	file, err := os.ReadFile(name(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name(1), file[:len(file)-1], 0o644); err != nil {
		t.Fatal(err)
	}
	if v := otactl(t, verifyArgs...); v.code != ota.ExitRefused || !strings.Contains(v.stderr, "size_mismatch") ||
		!strings.Contains(v.stderr, name(1)) || !strings.Contains(v.stderr, "payload.chunks.deltas[1].size") || v.stdout != "" {
		t.Errorf("truncated delta file: exit %d, stdout %q, stderr %q", v.code, v.stdout, v.stderr)
	}
	if err := os.Remove(name(1)); err != nil {
		t.Fatal(err)
	}
	v = otactl(t, verifyArgs...)
	if v.code != ota.ExitFailure || v.stdout != "" {
		t.Fatalf("missing delta file: exit %d, stdout %q, stderr %q; want exit %d as for a missing store", v.code, v.stdout, v.stderr, ota.ExitFailure)
	}
	for _, want := range []string{name(1), "payload.chunks.deltas[1]", deltas[1].From[:12], "no such file"} {
		if !strings.Contains(v.stderr, want) {
			t.Errorf("missing delta file: stderr %q does not say %q", v.stderr, want)
		}
	}
	if err := os.Remove(out + ".store"); err != nil {
		t.Fatal(err)
	}
	if s := otactl(t, verifyArgs...); s.code != v.code {
		t.Errorf("a missing store exits %d, a missing delta file %d", s.code, v.code)
	}
}

// secondOlder writes, beside updatePair's, another older image: oldImg with a
// byte changed every 700,000, so that its delta differs.
func secondOlder(t *testing.T, dir string, oldImg []byte) (string, []byte) {
	t.Helper()
	old2 := bytes.Clone(oldImg)
	for off := 500000; off < len(old2); off += 700000 {
		old2[off] ^= 0x55
	}
	path := filepath.Join(dir, "old2.img")
	if err := os.WriteFile(path, old2, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, old2
}
