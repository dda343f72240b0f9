package operator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/imagetest"
	"github.com/otad/otad/payload"
	"github.com/otad/otad/verify"
)

// TestSignDeltaFromExt4: of two ext4 images, sign --delta-from reads both file
// systems and writes file-aware deltas (a version 2 delta index), says how many
// chunks it rebuilds from their files' old bytes, and every delta rebuilds its chunk
// from the older image; verify --payload accepts the delta index.
func TestSignDeltaFromExt4(t *testing.T) {
	dir := t.TempDir()
	m := imagetest.MovedPair(t, 5, 48<<20)
	oldPath, newPath := filepath.Join(dir, "old.img"), filepath.Join(dir, "new.img")
	for p, b := range map[string][]byte{oldPath: m.Old, newPath: m.New} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustRun(t, "keygen", filepath.Join(dir, "k"))
	out := filepath.Join(dir, "rel")
	r := mustRun(t, "sign", "--key", filepath.Join(dir, "k.key"), "--image", newPath, "--version", "2", "--compatible", "c",
		"--url", "https://updates.example.com/rel", "--chunked", "--delta-from", oldPath, "--out-payload", out)
	mf, _ := manifestOf(t, r.stdout)
	if c := mf.Payload.Chunks; c.Deltas == nil || len(*c.Deltas) != 1 {
		t.Fatalf("chunks %+v, stderr %s", c, r.stderr)
	}
	if !strings.Contains(r.stderr, "against their files' old bytes") {
		t.Errorf("stderr does not say the deltas are file-aware: %s", r.stderr)
	}
	file := checkDeltaOf(t, &mf.Payload, 0, out, m.Old, m.New)
	d := (*mf.Payload.Chunks.Deltas)[0]
	idx, _ := os.ReadFile(out + ".idx")
	x, err := payload.ParseIndex(idx, verify.Expect(&mf.Payload))
	if err != nil {
		t.Fatal(err)
	}
	if dl, err := payload.ParseDelta(file[:d.IndexSize], verify.DeltaExpect(&mf.Payload, 0), x, "delta"); err != nil || dl.Version != 2 {
		t.Fatalf("delta index: %v", err)
	}
	v := mustRun(t, "verify", "--pub", filepath.Join(dir, "k.pub"), "--payload", out, writeEnvelope(t, dir, r.stdout))
	if !strings.Contains(v.stderr, "chunks OK, image sha256 OK") {
		t.Errorf("verify --payload said %q", v.stderr)
	}
}
