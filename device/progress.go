package device

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/otad/otad/ota"
)

// progress shows an install on its way. On a terminal it is one line,
// rewritten in place: phase, percent, bytes, rate and ETA. Elsewhere (a
// pipe, a file, the journal under systemd) a line that rewrites itself is
// noise, so it prints a plain line at each phase change only.
type progress struct {
	w       io.Writer
	tty     bool
	journal bool // the lines go to the journal: each says its priority

	phase   ota.Phase
	id      string
	samples []sample  // this phase's, the last rateWindow of them
	line    string    // on the terminal now; "" when cleared
	waiting time.Time // the Since of the wait for the network said last (plain output)
}

type sample struct {
	at   time.Time
	done int64
}

// rateWindow is how far back the rate looks: long enough to smooth over the
// writer's steps (it reports whole buffers), short enough to follow a
// network that slows down.
const rateWindow = 10 * time.Second

// pollEvery is how often the status is read: often enough for the eye.
const pollEvery = 200 * time.Millisecond

func newProgress(w io.Writer, getenv func(string) string, journal bool) *progress {
	// JOURNAL_STREAM: systemd connected stderr to the journal.
	tty := ota.IsTerminal(w) && getenv("JOURNAL_STREAM") == "" && getenv("TERM") != "dumb"
	return &progress{w: w, tty: tty, journal: journal}
}

// watch polls status until ctx ends; a failed poll (the daemon not there
// yet) is skipped.
func (p *progress) watch(ctx context.Context, status func(context.Context) (ota.Status, error)) {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		if st, err := status(ctx); err == nil {
			p.update(st, time.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// update shows st, taken at now.
func (p *progress) update(st ota.Status, now time.Time) {
	t := st.Target
	if t == nil || st.State == ota.Idle {
		return
	}
	if st.State != p.phase || t.ID != p.id {
		p.phase, p.id, p.samples = st.State, t.ID, nil
		if !p.tty {
			io.WriteString(p.w, atPriority(p.journal, slog.LevelInfo, fmt.Sprintf("otad: %s: %s (%s)\n", t.ID, st.State, size(t.BytesTotal))))
		}
	}
	if w := t.Waiting; w != nil {
		p.wait(*w, now)
		return
	}
	p.waiting = time.Time{}
	p.samples = append(p.samples, sample{now, t.BytesDone})
	for len(p.samples) > 2 && now.Sub(p.samples[0].at) > rateWindow {
		p.samples = p.samples[1:]
	}
	if !p.tty {
		return
	}
	var rate float64
	first, last := p.samples[0], p.samples[len(p.samples)-1]
	if dt := last.at.Sub(first.at).Seconds(); dt > 0 && last.done > first.done {
		rate = float64(last.done-first.done) / dt
	}
	if line := progressLine(ota.Progress{Phase: st.State, BytesDone: t.BytesDone, BytesTotal: t.BytesTotal, BytesPerSecond: rate}); line != p.line {
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
		p.line = line
	}
}

// wait shows a download that waits for the network: on the terminal the
// line counts down to the next try; elsewhere one line a wait.
func (p *progress) wait(w ota.Waiting, now time.Time) {
	line := waitLine(w, now)
	if !p.tty {
		if !w.Since.Equal(p.waiting) {
			p.waiting = w.Since
			io.WriteString(p.w, atPriority(p.journal, slog.LevelWarn, fmt.Sprintf("otad: %s: %s\n", p.id, line)))
		}
		return
	}
	if line != p.line {
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
		p.line = line
	}
}

// waitLine is "waiting for the network (1:05): dial tcp ...: connection
// refused; next try in 40s".
func waitLine(w ota.Waiting, now time.Time) string {
	what := w.For
	if what == ota.WaitNetwork {
		what = "the network"
	}
	next := max(0, w.NextTry.Sub(now).Round(time.Second))
	return fmt.Sprintf("waiting for %s (%s): %s; next try in %s", what, clock(now.Sub(w.Since)), w.Error, next)
}

// finish clears the progress line, for the outcome to take its place.
func (p *progress) finish() {
	if p.line != "" {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.line = ""
	}
}

// progressLine is "downloading  42%  1.3 GiB of 3.0 GiB  35.1 MiB/s  ETA 0:51".
func progressLine(p ota.Progress) string {
	done, total, rate := p.BytesDone, p.BytesTotal, p.BytesPerSecond
	pct := 0
	if total > 0 {
		pct = int(min(100, max(0, done*100/total)))
	}
	eta, r := "--:--", "-"
	if rate > 0 {
		r = ota.HumanRate(rate)
		if total >= done {
			eta = clock(time.Duration(float64(total-done) / rate * float64(time.Second)))
		}
	}
	return fmt.Sprintf("%-11s %3d%%  %s of %s  %s  ETA %s", p.Phase, pct, size(done), size(total), r, eta)
}

// size is a byte count as people read it: "3.0 GiB".
func size(n int64) string { return ota.HumanSize(n) }

// clock is a duration as m:ss, or h:mm:ss from an hour.
func clock(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
