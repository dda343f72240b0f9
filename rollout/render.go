package rollout

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/otad/otad/ota"
)

// barWidth is the width of a wave's progress bar.
const barWidth = 30

// Render writes a rollout's state for people: the headline, then a row per
// wave with a progress bar ('#' a good outcome, 'x' a failed one, '.' none
// yet), then the last changes. The rows come from a state read from a
// broker (bounded by DecodeState); the loop stops when ctx ends. now is
// the clock the lease is read against: a controller killed leaves its last
// renewal behind, which must not read as a live one.
func Render(ctx context.Context, w io.Writer, s State, history int, now time.Time) error {
	var b strings.Builder
	fmt.Fprintf(&b, "rollout %s: %s", s.Name, strings.ToUpper(s.Phase))
	if s.Reason != "" {
		fmt.Fprintf(&b, " — %s", s.Reason)
	}
	fmt.Fprintf(&b, "\noffer %s (sha256 %s), group %s, plan %s\n", s.Offer.ID, short(s.Offer.SHA256), s.Group, short(s.PlanHash))
	c := s.Counts
	fmt.Fprintf(&b, "devices %d: %s", c.Devices, countsLine(c))
	if s.Accepted > 0 {
		fmt.Fprintf(&b, " (%d failures accepted by a resume)", s.Accepted)
	}
	b.WriteString("\n")
	if l := s.Lease; l != nil {
		b.WriteString(leaseLine(l, now))
	}
	if w := current(s); w != nil && w.Pace != nil && w.Offered.IsZero() {
		fmt.Fprintf(&b, "pace %.0f offers a minute, %d queued\n", w.Pace.PerMinute, w.Queued)
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WAVE\tDEVICES\tQUEUED\tPROGRESS\tOUTCOMES\tSTARTED\tENDED")
	for i := range max(s.WaveCount, len(s.Waves)) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if i >= len(s.Waves) {
			fmt.Fprintf(tw, "%d\t-\t-\t-\tnot started\t-\t-\n", i+1)
			continue
		}
		w := s.Waves[i]
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\n", i+1, w.Counts.Devices, w.Queued, bar(w.Counts, w.Queued), countsLine(w.Counts), clock(w.Started), clock(w.Ended))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := min(history, len(s.History)); n > 0 {
		b.WriteString("\n")
		for _, ch := range s.History[len(s.History)-n:] {
			fmt.Fprintf(&b, "%s  %s\n", ch.Time.Local().Format(time.DateTime), ch.Event)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// leaseLine is who runs the rollout: the live holder, or that none does
// (docs/contract/rollouts.md: a released or expired lease is the next
// controller's to take).
func leaseLine(l *Lease, now time.Time) string {
	line := fmt.Sprintf("controller %s (epoch %d), since %s", l.Holder, l.Epoch, clock(l.Since))
	switch {
	case !l.Released.IsZero():
		return fmt.Sprintf("%s, stopped %s (lease released): no controller runs it; otactl rollout start with its plan takes it over\n", line, clock(l.Released))
	case !l.Live(now):
		return fmt.Sprintf("%s, lease expired %s (last renewed %s): no controller runs it; otactl rollout start with its plan takes it over\n", line, clock(l.Expires()), clock(l.Renewed))
	}
	return fmt.Sprintf("%s, lease renewed %s\n", line, clock(l.Renewed))
}

// Unrun says that no controller runs a rollout not ended — its lease
// released, or unrenewed past its TTL by now — naming the last holder,
// when, and what takes it over; "" while a controller holds it. `otactl
// rollout status --watch` says it once: nothing moves meanwhile.
func Unrun(s State, now time.Time) string {
	l := s.Lease
	if l == nil || s.Terminal() || l.Live(now) {
		return ""
	}
	what := fmt.Sprintf("the lease of %s (epoch %d) expired %s (last renewed %s)", l.Holder, l.Epoch, clock(l.Expires()), clock(l.Renewed))
	if !l.Released.IsZero() {
		what = fmt.Sprintf("%s (epoch %d) released its lease %s", l.Holder, l.Epoch, clock(l.Released))
	}
	return fmt.Sprintf("no controller runs rollout %s: %s; nothing moves until otactl rollout start with its plan takes it over", s.Name, what)
}

func current(s State) *WaveState {
	if len(s.Waves) == 0 {
		return nil
	}
	return &s.Waves[len(s.Waves)-1]
}

// bar is a wave's progress: outcomes out of the devices offered and the
// ones still queued behind the pace (a paused paced wave is not done).
func bar(c Counts, queued int) string {
	all := c.Devices + queued
	if all == 0 {
		return "[" + strings.Repeat(" ", barWidth) + "] 100%"
	}
	bad := c.Bad()
	good := c.Outcomes() - bad
	// Cumulative ends, so the three parts always fill the bar exactly.
	g, gx := good*barWidth/all, c.Outcomes()*barWidth/all
	if bad > 0 && gx == g { // a failure always shows
		if g > 0 {
			g--
		} else {
			gx++
		}
	}
	return fmt.Sprintf("[%s%s%s] %3d%%", strings.Repeat("#", g), strings.Repeat("x", gx-g), strings.Repeat(".", barWidth-gx),
		c.Outcomes()*100/all)
}

// countsLine lists the counts that are not zero: "40 success, 2 failed, 6 pending".
func countsLine(c Counts) string {
	var parts []string
	for _, p := range []struct {
		n    int
		name ota.Result
	}{
		{c.Success, ota.ResultSuccess}, {c.UpToDate, ota.ResultUpToDate}, {c.Superseded, ota.ResultSuperseded},
		{c.Failed, ota.ResultFailed}, {c.RolledBack, ota.ResultRolledBack}, {c.Rejected, ota.ResultRejected},
		{c.TimedOut, TimedOut}, {c.Pending, "pending"},
	} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.name))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
