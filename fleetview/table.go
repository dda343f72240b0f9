package fleetview

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/otad/otad/ota"
)

// progressFresh is how long a progress message is shown after it arrived.
const progressFresh = 30 * time.Second

// Render writes the fleet table, a row a device; withBars adds a progress
// bar column (for a live view).
func (v *View) Render(w io.Writer, withBars bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	ids := make([]string, 0, len(v.devices))
	for id := range v.devices {
		ids = append(ids, id)
	}
	sort.Strings(ids)

	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	header := "DEVICE\tONLINE\tSTATE\tBOOTED\tSLOT A\tSLOT B\tTARGET\tLAST RESULT\tSEQ"
	if withBars {
		header += "\tPROGRESS"
	}
	fmt.Fprintln(tw, header)
	now := v.now()
	for _, id := range ids {
		row := v.devices[id].row(id, now)
		if !withBars {
			row = row[:len(row)-1]
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// row is the device's table row, the progress bar last.
func (d *record) row(id string, now time.Time) []string {
	online := "?"
	if d.online != nil {
		online = map[bool]string{true: "yes", false: "no"}[*d.online]
	}
	state, booted, slotA, slotB, target, last, seq := "?", "-", "-", "-", "-", "-", "-"
	var p *ota.Progress
	// A bar only while bytes move: progress is QoS 0 and rate limited, so
	// the last report is rarely 100% and must not outlive the download.
	moving := d.status == nil || d.status.State == ota.Downloading || d.status.State == ota.Verifying
	if d.progress != nil && moving && now.Sub(d.progressAt) < progressFresh {
		p = d.progress
	}
	switch s := d.status; {
	case d.statusErr != nil:
		state = "(bad status)"
	case s != nil:
		state = OrDash(string(s.State))
		booted = OrDash(string(s.BootedSlot))
		slotA, slotB = OrDash(s.Slots[ota.SlotA].Version), OrDash(s.Slots[ota.SlotB].Version)
		if t := s.Target; t != nil && (t.ID != "" || t.Version != "") {
			done, total := t.BytesDone, t.BytesTotal
			if p != nil && p.ID == t.ID { // progress is fresher than the snapshot
				done, total = p.BytesDone, p.BytesTotal
			}
			target = OrDash(t.Version)
			if total > 0 {
				target += fmt.Sprintf(" %d%%", percent(done, total))
			}
		}
		last = OrDash(briefOf(s.LastResult))
		seq = fmt.Sprint(s.Seq)
	}
	bar := ""
	if p != nil {
		bar = progressBar(p.BytesDone, p.BytesTotal, p.BytesPerSecond)
	}
	return []string{clean(id), online, clean(state), clean(booted), clean(slotA), clean(slotB), clean(target), clean(last), seq, bar}
}

// OrDash shows an empty cell as "-".
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clean keeps what a device sent from breaking the table or the terminal.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '\t' {
			return '?'
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 40 {
		s = string(r[:39]) + "…"
	}
	return s
}

func percent(done, total int64) int {
	if total <= 0 || done < 0 {
		return 0
	}
	return int(min(100, done*100/total))
}

// progressBar renders "[#####.....] 50% 12.3 MiB/s".
func progressBar(done, total int64, rate float64) string {
	const width = 20
	pct := percent(done, total)
	n := pct * width / 100
	s := fmt.Sprintf("[%s%s] %3d%%", strings.Repeat("#", n), strings.Repeat(".", width-n), pct)
	if rate > 0 {
		s += " " + HumanRate(rate)
	}
	return s
}

// HumanRate shows bytes per second as "12.3 MiB/s".
func HumanRate(r float64) string {
	units := []string{"B/s", "KiB/s", "MiB/s", "GiB/s"}
	i := 0
	for r >= 1024 && i < len(units)-1 {
		r /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", r, units[i])
}

// IsTerminal reports whether w is a terminal, where the table is redrawn in
// place rather than printed again.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
