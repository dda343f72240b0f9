package operator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// signProgress shows how far signing has read the image, on a terminal
// only (stderr): hashing and compressing a large image takes minutes (xz:
// about 2 s a MiB), and a silent command looks hung. Elsewhere (a pipe, a
// CI log) it shows nothing; the summary says what came of it.
type signProgress struct {
	w     io.Writer
	what  string // "hashing", "hashing and compressing (xz)"
	total int64  // the image's size; 0: unknown
	now   func() time.Time

	done        int64
	start, last time.Time
	drawn       bool
}

// progressEvery is how often the line is redrawn: often enough for the eye.
const progressEvery = 200 * time.Millisecond

// newSignProgress is the progress of reading an image of total bytes, or
// nil when w is no terminal.
func newSignProgress(w io.Writer, tty bool, what string, total int64, now func() time.Time) *signProgress {
	if !tty {
		return nil
	}
	t := now()
	return &signProgress{w: w, what: what, total: total, now: now, start: t, last: t}
}

// reader counts what is read through it; r itself for a nil progress.
func (p *signProgress) reader(r io.Reader) io.Reader {
	if p == nil {
		return r
	}
	return progressReader{r, p}
}

type progressReader struct {
	r io.Reader
	p *signProgress
}

func (pr progressReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	pr.p.add(int64(n))
	return n, err
}

func (p *signProgress) add(n int64) {
	p.done += n
	if t := p.now(); t.Sub(p.last) >= progressEvery {
		p.last = t
		fmt.Fprintf(p.w, "\r\x1b[K%s", p.line(t))
		p.drawn = true
	}
}

// line is "hashing and compressing (xz)  42%  54.0 MiB of 128.0 MiB  3.1 MiB/s  ETA 0:23".
func (p *signProgress) line(now time.Time) string {
	s := p.what
	if p.total > 0 {
		s += fmt.Sprintf(" %3d%%  %s of %s", min(100, p.done*100/p.total), ota.HumanSize(p.done), ota.HumanSize(p.total))
	} else {
		s += "  " + ota.HumanSize(p.done)
	}
	if secs := now.Sub(p.start).Seconds(); secs > 0 && p.done > 0 {
		rate := float64(p.done) / secs
		s += "  " + ota.HumanRate(rate)
		if p.total >= p.done {
			left := time.Duration(float64(p.total-p.done) / rate * float64(time.Second)).Round(time.Second)
			s += fmt.Sprintf("  ETA %d:%02d", int(left.Minutes()), int(left.Seconds())%60)
		}
	}
	return s
}

// finish clears the line, for the summary to take its place.
func (p *signProgress) finish() {
	if p != nil && p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}

// mib is a size in MiB, as the summary gives every size: "128.0 MiB".
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// signSummary is the line sign ends with on stderr: what was signed, the
// sizes of the image and of what devices download, and until when it is
// valid.
func signSummary(m verify.Manifest, manifest []byte, out string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "signed %s (version %s, manifest sha256 %s): image %s", m.ID, m.Version, short12(digestOf(manifest)), mib(m.Payload.Size))
	switch p := m.Payload; {
	case p.Chunks != nil:
		fmt.Fprintf(&b, ", chunked payload %s (%s.idx and %s.store)", mib(p.Chunks.IndexSize+p.Chunks.StoreSize), out, out)
	case p.DownloadSize > 0:
		fmt.Fprintf(&b, ", payload %s (%s, %s)", mib(p.DownloadSize), p.Compression, out)
	default:
		b.WriteString(", payload the image itself")
	}
	fmt.Fprintf(&b, "; expires %s\n", m.ExpiresAt.UTC().Format(time.RFC3339))
	return b.String()
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func short12(s string) string { return s[:min(12, len(s))] }
