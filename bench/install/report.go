package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/otad/otad/internal/testkit/otadrun"
)

// phaseStats collects one phase's samples over the rounds and its targets.
type phaseStats struct {
	name string
	// minRatio is the least acceptable ratio of this phase's median
	// throughput to the baseline's (to ref's, when set); 0 means no target
	// (a reference phase).
	minRatio float64
	ref      *phaseStats
	// maxRSS is the largest acceptable peak RSS in bytes; 0 means no target.
	maxRSS  int64
	samples []sample
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// rate is a sample's throughput in MiB/s.
func rate(s sample, size int64) float64 { return mib(size) / s.dur.Seconds() }

func (p *phaseStats) each(f func(sample) float64) []float64 {
	xs := make([]float64, len(p.samples))
	for i, s := range p.samples {
		xs[i] = f(s)
	}
	return xs
}

func (p *phaseStats) medianRate(size int64) float64 {
	return otadrun.Median(p.each(func(s sample) float64 { return rate(s, size) }))
}

// peakRSS is the largest peak over the rounds: the target is a ceiling.
func (p *phaseStats) peakRSS() int64 {
	var m int64
	for _, s := range p.samples {
		m = max(m, s.rss)
	}
	return m
}

// tail is the median time from "image written and synced" to the end
// (the readback's lag behind the writer), when the phase knows it.
func (p *phaseStats) tail() string {
	var xs []float64
	for _, s := range p.samples {
		if s.written > 0 {
			xs = append(xs, (s.dur - s.written).Seconds())
		}
	}
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", otadrun.Median(xs))
}

// verdict says whether the phase met its targets, and if not which it missed.
func (p *phaseStats) verdict(ratio float64, peak int64) string {
	if p.minRatio == 0 && p.maxRSS == 0 {
		return "-"
	}
	var missed []string
	if p.minRatio > 0 && ratio < p.minRatio {
		missed = append(missed, fmt.Sprintf("throughput %.2fx < %.2fx", ratio, p.minRatio))
	}
	if p.maxRSS > 0 && peak > p.maxRSS {
		missed = append(missed, fmt.Sprintf("RSS %.1f MiB > %.0f MiB", mib(peak), mib(p.maxRSS)))
	}
	if len(missed) > 0 {
		return "FAIL (" + strings.Join(missed, ", ") + ")"
	}
	return "PASS"
}

// printRound prints one round's throughputs, each with its ratio to the
// same round's baseline (phases[0]).
func printRound(out io.Writer, round int, phases []*phaseStats, size int64) {
	base := rate(phases[0].samples[round], size)
	var b strings.Builder
	fmt.Fprintf(&b, "round %d:", round+1)
	for i, p := range phases {
		r := rate(p.samples[round], size)
		if i == 0 {
			fmt.Fprintf(&b, "  %s %.1f MiB/s", p.name, r)
			continue
		}
		fmt.Fprintf(&b, " | %s %.1f MiB/s %.2fx", p.name, r, r/base)
	}
	fmt.Fprintln(out, b.String())
}

// printTable prints medians over the rounds against the baseline's median
// (phases[0]) and returns whether every target was met.
func printTable(out io.Writer, phases []*phaseStats, size int64) bool {
	base := phases[0].medianRate(size)
	fmt.Fprintf(out, "\n%d rounds, %.0f MiB each; wall time, MiB/s (image over wall time), bytes the server sent, user and system CPU seconds per GiB of image, storage reads and tail (end of the writer's final fdatasync to the end) are medians, peak RSS the largest:\n", len(phases[0].samples), mib(size))
	const row = "%-46s %7s %8s %7s %7s %11s %10s %8s %8s %13s %7s  %s\n"
	fmt.Fprintf(out, row, "phase", "wall", "MiB/s", "ratio", "target", "fetched", "peak RSS", "user/GiB", "sys/GiB", "storage read", "tail", "result")
	ok, refs := true, false
	for _, p := range phases {
		r := p.medianRate(size)
		peak := p.peakRSS()
		target := "-"
		if p.minRatio > 0 {
			target = fmt.Sprintf("%.2fx", p.minRatio)
		}
		ratio := r / base
		if p.ref != nil {
			ratio = r / p.ref.medianRate(size)
			target += "*"
			refs = true
		}
		wall := otadrun.Median(p.each(func(s sample) float64 { return s.dur.Seconds() }))
		fetched := "-"
		if f := otadrun.Median(p.each(func(s sample) float64 { return float64(s.fetched) })); f > 0 {
			fetched = fmt.Sprintf("%.1f MiB", mib(int64(f)))
		}
		rss := "-"
		if peak > 0 {
			rss = fmt.Sprintf("%.1f MiB", mib(peak))
		}
		v := p.verdict(ratio, peak)
		if strings.HasPrefix(v, "FAIL") {
			ok = false
		}
		perGiB := func(d func(sample) time.Duration) string {
			return fmt.Sprintf("%.2fs", otadrun.Median(p.each(func(s sample) float64 { return d(s).Seconds() }))*float64(1<<30)/float64(size))
		}
		read := otadrun.Median(p.each(func(s sample) float64 { return mib(s.fromStorage) }))
		fmt.Fprintf(out, row, p.name, fmt.Sprintf("%.2fs", wall), fmt.Sprintf("%.1f", r), fmt.Sprintf("%.2fx", ratio), target, fetched, rss,
			perGiB(func(s sample) time.Duration { return s.user }), perGiB(func(s sample) time.Duration { return s.sys }), fmt.Sprintf("%.0f MiB", read), p.tail(), v)
	}
	if refs {
		fmt.Fprintln(out, "* ratio and target against the ideal of the same payload kind, read-back and cores (raw for chunked), measured in the same rounds")
	}
	if ok {
		fmt.Fprintln(out, "RESULT: PASS (all targets met)")
	} else {
		fmt.Fprintln(out, "RESULT: FAIL (see the rows marked FAIL)")
	}
	return ok
}
