package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// mb is bytes in (decimal) megabytes, as the issue quotes its figures.
func mb(n int64) float64 { return float64(n) / 1e6 }

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}

func (r *installRow) wall() time.Duration {
	xs := make([]float64, len(r.samples))
	for i, s := range r.samples {
		xs[i] = float64(s.Wall)
	}
	return time.Duration(median(xs))
}

func (r *installRow) cpu() time.Duration {
	xs := make([]float64, len(r.samples))
	for i, s := range r.samples {
		xs[i] = float64(s.CPU)
	}
	return time.Duration(median(xs))
}

// fetched is the median of what the server sent.
func (r *installRow) fetched() int64 {
	xs := make([]float64, len(r.sent))
	for i, n := range r.sent {
		xs[i] = float64(n)
	}
	return int64(median(xs))
}

// peakRSS is the largest over the rounds: the target is a ceiling.
func (r *installRow) peakRSS() int64 {
	var m int64
	for _, s := range r.samples {
		m = max(m, s.PeakRSS)
	}
	return m
}

// ratioVerdict holds got against a ceiling: "PASS (1.20x ≤ 1.50x)".
func ratioVerdict(got, limit float64) string {
	if got <= limit {
		return fmt.Sprintf("PASS (%.2fx ≤ %.2fx)", got, limit)
	}
	return fmt.Sprintf("FAIL (%.2fx > %.2fx)", got, limit)
}

// said is what otad reported of an install.
func (t transfer) said() string {
	parts := []string{fmt.Sprintf("fetched %.2f MB", mb(t.Fetched))}
	if t.Delta > 0 {
		parts = append(parts, fmt.Sprintf("delta %.2f MB", mb(t.Delta)))
	}
	if t.Reused > 0 {
		parts = append(parts, fmt.Sprintf("reused %.2f MB", mb(t.Reused)))
	}
	return strings.Join(parts, ", ")
}

// casyncBytes is casync's figure: the new chunks and the index.
func (res *pairResult) casyncBytes() int64 { return res.peers.Casync.Bytes + res.peers.CasyncIndex }

// printBytes prints what each way of sending the update costs, with the
// ratios to xdelta3 and casync and the targets' verdicts.
func printBytes(out io.Writer, res *pairResult) {
	fmt.Fprintf(out, "%s, %s old → %s new: bytes to send the update (MB = 10^6 bytes)\n",
		res.p.name, sizeName(res.oldSize), sizeName(res.newSize))
	const row = "  %-40s %12s %9s %9s  %s\n"
	fmt.Fprintf(out, row, "method", "bytes", "/xdelta3", "/casync", "detail")
	ratios := func(n int64) (string, string) {
		x, c := "-", "-"
		if res.peers.Xdelta3.Bytes > 0 {
			x = fmt.Sprintf("%.2fx", float64(n)/float64(res.peers.Xdelta3.Bytes))
		}
		if res.casyncBytes() > 0 {
			c = fmt.Sprintf("%.2fx", float64(n)/float64(res.casyncBytes()))
		}
		return x, c
	}
	line := func(name string, n int64, detail string) {
		x, c := ratios(n)
		fmt.Fprintf(out, row, name, fmt.Sprintf("%.2f MB", mb(n)), x, c, detail)
	}
	for _, r := range res.updates {
		if r.unavailable != "" {
			fmt.Fprintf(out, row, r.name, "-", "-", "-", r.unavailable)
			continue
		}
		line(r.name, r.fetched(), "server sent; otad says "+r.said.said())
	}
	line(res.peers.Xdelta3.Name, res.peers.Xdelta3.Bytes, "patch; decodes to new")
	line("casync 64 KiB avg, --seed=old", res.casyncBytes(),
		fmt.Sprintf("--chunk-size %s: %d of %d chunks new, %.2f MB + index %.2f MB; a real extract --seed fetched %.2f MB",
			casyncChunkSize, res.peers.Casync.NewChunks, res.peers.Casync.Chunks, mb(res.peers.Casync.Bytes), mb(res.peers.CasyncIndex), mb(res.peers.CasyncSent)))
	line(res.peers.Zstd.Name, res.peers.Zstd.Bytes, "patch; decodes to new")
	if res.delta.unavailable != "" {
		fmt.Fprintf(out, "  targets: otad with deltas — %s\n", res.delta.unavailable)
		return
	}
	d := float64(res.delta.fetched())
	var v []string
	if res.p.name == "ext4" {
		v = append(v, "≤ 1.5× xdelta3: "+ratioVerdict(d/float64(res.peers.Xdelta3.Bytes), maxDeltaVsXdelta3))
	}
	v = append(v, "≤ casync: "+ratioVerdict(d/float64(res.casyncBytes()), maxDeltaVsCasync))
	fmt.Fprintf(out, "  targets, otad with deltas: %s\n", strings.Join(v, "; "))
}

// printInstalls prints each install's wall time, throughput and peak RSS
// against the stream install's in the same run, with the targets.
func printInstalls(out io.Writer, res *pairResult, rounds int) {
	fmt.Fprintf(out, "%s: installs of the new image, %d rounds (wall time and CPU medians, peak RSS the largest), against the stream install\n",
		res.p.name, rounds)
	const row = "  %-32s %8s %8s %9s %10s %9s %8s  %-24s %s\n"
	fmt.Fprintf(out, row, "install", "wall", "MiB/s", "vs stream", "peak RSS", "vs stream", "CPU", "target", "result")
	base := res.stream
	for _, r := range res.installs {
		if r.unavailable != "" {
			fmt.Fprintf(out, "  %-32s %s\n", r.name, r.unavailable)
			continue
		}
		speed := base.wall().Seconds() / r.wall().Seconds()
		rss := float64(r.peakRSS()) / float64(base.peakRSS())
		target := fmt.Sprintf("RSS ≤ %.0f MiB", mib(maxRSS))
		var missed []string
		if r.minRatio > 0 {
			target = fmt.Sprintf("≥ %.2fx, ", r.minRatio) + target
			if speed < r.minRatio {
				missed = append(missed, fmt.Sprintf("throughput %.2fx < %.2fx", speed, r.minRatio))
			}
		}
		if r.peakRSS() > maxRSS {
			missed = append(missed, fmt.Sprintf("RSS %.1f MiB > %.0f MiB", mib(r.peakRSS()), mib(maxRSS)))
		}
		result := "PASS"
		if len(missed) > 0 {
			result = "FAIL (" + strings.Join(missed, ", ") + ")"
		}
		fmt.Fprintf(out, row, r.name, fmt.Sprintf("%.2fs", r.wall().Seconds()), fmt.Sprintf("%.1f", mib(res.newSize)/r.wall().Seconds()),
			fmt.Sprintf("%.2fx", speed), fmt.Sprintf("%.1f MiB", mib(r.peakRSS())), fmt.Sprintf("%.2fx", rss),
			fmt.Sprintf("%.2fs", r.cpu().Seconds()), target, result)
	}
	fmt.Fprintln(out)
}

// roundLine is one round's installs: wall time and what the server sent.
func roundLine(rows []*installRow, round int, size int64) string {
	var b strings.Builder
	for _, r := range rows {
		if len(r.samples) <= round {
			continue
		}
		s := r.samples[round]
		fmt.Fprintf(&b, " | %s %.2fs %.1f MiB/s %.2f MB", r.name, s.Wall.Seconds(), mib(size)/s.Wall.Seconds(), mb(r.sent[round]))
	}
	return b.String()
}
