package fleetview

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/otad/otad/ota"
)

// progressFresh is how long a progress message is shown after it arrived.
const progressFresh = 30 * time.Second

// Render writes the table of the devices f picks, a row a device;
// withBars adds a progress bar column (for a live view).
func (v *View) Render(w io.Writer, f Filter, withBars bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	header := "DEVICE\tONLINE\tSTATE\tRUNNING\tBOOTED\tSLOT A\tSLOT B\tTARGET\tLAST RESULT\tSEQ"
	if withBars {
		header += "\tPROGRESS"
	}
	fmt.Fprintln(tw, header)
	now := v.now()
	for _, e := range v.orderLocked() {
		id, d := e.id, e.rec
		if !f.match(id, d) {
			continue
		}
		row := d.row(id, now)
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
	dev := d.device(id, now)
	online := map[string]string{OnlineYes: "yes", OnlineNo: "no", OnlineUnknown: "?"}[d.presence()]
	state, running, booted, slotA, slotB, target, last, seq := "?", "-", "-", "-", "-", "-", "-", "-"
	switch {
	case d.statusErr != nil:
		state = "(bad status)"
	case d.status != nil:
		state = OrDash(string(dev.State))
		running, booted = OrDash(dev.Running), OrDash(string(dev.Booted))
		slotA, slotB = slotCell(dev.Slots[ota.SlotA]), slotCell(dev.Slots[ota.SlotB])
		if t := dev.Target; t != nil {
			target = OrDash(t.Version)
			if t.BytesTotal > 0 {
				target += fmt.Sprintf(" %d%%", percent(t.BytesDone, t.BytesTotal))
			}
		}
		last = OrDash(briefOf(dev.Result()))
		seq = fmt.Sprint(dev.Seq)
	}
	bar := ""
	if p := d.freshProgress(now); p != nil {
		bar = progressBar(p.BytesDone, p.BytesTotal, p.BytesPerSecond)
	}
	return []string{clean(id), online, clean(state), clean(running), clean(booted), clean(slotA), clean(slotB), clean(target), clean(last), seq, bar}
}

// slotCell is a slot's version and whether it is good: "2.0.0 (good)",
// "2.1.0 (bad)", so a rolled-back image does not look installed.
func slotCell(s SlotView) string {
	if s.Version == "" {
		return "-"
	}
	if s.Status == "" {
		return s.Version
	}
	return s.Version + " (" + string(s.Status) + ")"
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
		s += " " + ota.HumanRate(rate)
	}
	return s
}
