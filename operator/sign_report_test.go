package operator

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/verify"
)

// verifyDigest is the manifest digest of the envelope sign printed.
func verifyDigest(t *testing.T, envelope string) string {
	t.Helper()
	d := verify.EnvelopeDigest([]byte(strings.TrimSpace(envelope)))
	if d == "" {
		t.Fatalf("no manifest in %q", envelope)
	}
	return d
}

// Issue 27: `otactl sign --compress xz` of 128 MiB ran minutes without a
// word. On a terminal the image's reading shows as a line redrawn in place
// at most every progressEvery, cleared at the end; off a terminal nothing.
func TestSignProgress(t *testing.T) {
	clock := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	if p := newSignProgress(io.Discard, false, "hashing", 100, now); p != nil {
		t.Fatal("a progress off a terminal")
	}
	var out bytes.Buffer
	const total = 128 << 20
	p := newSignProgress(&out, true, "hashing and compressing (xz)", total, now)
	r := p.reader(io.LimitReader(zeros{}, total))
	buf := make([]byte, 8<<20)
	for range 4 { // 32 MiB in 4 s
		clock = clock.Add(time.Second)
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
	}
	clock = clock.Add(time.Millisecond) // too soon to redraw
	io.ReadFull(r, buf)
	p.finish()
	lines := strings.Split(out.String(), "\r\x1b[K")
	want := "hashing and compressing (xz)  25%  32.0 MiB of 128.0 MiB  8.0 MiB/s  ETA 0:12"
	if len(lines) != 6 || lines[4] != want || lines[5] != "" {
		t.Errorf("progress %q, want 4 lines, the last %q, then cleared", out.String(), want)
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }
