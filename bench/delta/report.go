package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/otad/otad/internal/testkit/otadrun"
)

// mb is bytes in (decimal) megabytes, as the issue quotes its figures.
func mb(n int64) float64 { return float64(n) / 1e6 }

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func (r *installRow) wall() time.Duration {
	xs := make([]float64, len(r.samples))
	for i, s := range r.samples {
		xs[i] = float64(s.Wall)
	}
	return time.Duration(otadrun.Median(xs))
}

func (r *installRow) cpu() time.Duration {
	xs := make([]float64, len(r.samples))
	for i, s := range r.samples {
		xs[i] = float64(s.CPU)
	}
	return time.Duration(otadrun.Median(xs))
}

// fetched is the median of what the server sent.
func (r *installRow) fetched() int64 {
	xs := make([]float64, len(r.sent))
	for i, n := range r.sent {
		xs[i] = float64(n)
	}
	return int64(otadrun.Median(xs))
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
	if t.Path != "" {
		parts = append([]string{"path " + t.Path}, parts...)
	}
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
// ratios to xdelta3 and casync and the targets' verdicts; it returns the
// targets missed.
func printBytes(out io.Writer, res *pairResult) []string {
	fmt.Fprintf(out, "%s, %.1f MB old → %.1f MB new: bytes to send the update (MB = 10^6 bytes)\n",
		res.p.name, mb(res.oldSize), mb(res.newSize))
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
		if r.failed != "" && r.failedSent > 0 {
			// What a failed install moved, without ratios: no result to hold against the peers.
			fmt.Fprintf(out, row, r.name, fmt.Sprintf("%.2f MB", mb(r.failedSent)), "-", "-",
				r.skipped()+"; otad says "+r.said.said())
			continue
		}
		if r.skipped() != "" {
			fmt.Fprintf(out, row, r.name, "-", "-", "-", r.skipped())
			continue
		}
		line(r.name, r.fetched(), "server sent; otad says "+r.said.said())
	}
	line(res.peers.Xdelta3.Name, res.peers.Xdelta3.Bytes, "patch; decodes to new")
	line("casync 64 KiB avg, --seed=old", res.casyncBytes(),
		fmt.Sprintf("--chunk-size %s: %d of %d chunks new, %.2f MB + index %.2f MB; a real extract --seed fetched %.2f MB",
			casyncChunkSize, res.peers.Casync.NewChunks, res.peers.Casync.Chunks, mb(res.peers.Casync.Bytes), mb(res.peers.CasyncIndex), mb(res.peers.CasyncSent)))
	line(res.peers.Zstd.Name, res.peers.Zstd.Bytes, "patch; decodes to new")
	if b := res.peers.Bsdiff; b.Bytes > 0 {
		line(b.Name, b.Bytes, "patch; bspatch makes new of it")
	} else {
		fmt.Fprintf(out, row, "bsdiff", "-", "-", "-", b.Name)
	}
	misses := freshVsStream(out, res)
	switch {
	case res.delta.unavailable != "":
		fmt.Fprintf(out, "  targets: otad with deltas — %s\n", res.delta.unavailable)
		return misses
	case res.delta.failed != "":
		// printInstalls lists the failure among the misses.
		fmt.Fprintf(out, "  targets, otad with deltas: FAIL (the install failed)\n")
		return misses
	}
	d := float64(res.delta.fetched())
	var v []string
	check := func(what string, got, limit float64) {
		verdict := ratioVerdict(got, limit)
		v = append(v, what+": "+verdict)
		if strings.HasPrefix(verdict, "FAIL") {
			misses = append(misses, fmt.Sprintf("%s: otad with deltas %s %s", res.p.name, what, verdict))
		}
	}
	if res.p.name == "ext4" {
		check("≤ 1.5× xdelta3", d/float64(res.peers.Xdelta3.Bytes), maxDeltaVsXdelta3)
	}
	check("≤ casync", d/float64(res.casyncBytes()), maxDeltaVsCasync)
	fmt.Fprintf(out, "  targets, otad with deltas: %s\n", strings.Join(v, "; "))
	return misses
}

// freshVsStream prints what a device with nothing to reuse fetches of the
// chunked payload against the stream payload of the same image (issue 30:
// at most 1.05×), and returns the target when missed.
func freshVsStream(out io.Writer, res *pairResult) []string {
	f, s := res.fresh, res.stream
	if f == nil || f.skipped() != "" || s.skipped() != "" {
		return nil
	}
	verdict := ratioVerdict(float64(f.fetched())/float64(s.fetched()), maxFreshVsStream)
	fmt.Fprintf(out, "  chunked with nothing to reuse: %.2f MB (index and store) against the stream's %.2f MB: %s\n",
		mb(f.fetched()), mb(s.fetched()), verdict)
	if strings.HasPrefix(verdict, "FAIL") {
		return []string{fmt.Sprintf("%s: chunked with nothing to reuse against the stream %s", res.p.name, verdict)}
	}
	return nil
}

// printCPU prints the device's CPU per install on the installs' cores:
// otad's stream install, its install with deltas (issue 30: at most 1.5×
// the stream's) and the peers' own decodes of their patches; it returns
// the target when missed.
func printCPU(out io.Writer, res *pairResult, cpus string) []string {
	const row = "  %-32s %8s %8s %10s\n"
	where := "taskset -c " + cpus
	if cpus == "" {
		where = "every core"
	}
	fmt.Fprintf(out, "%s: the device's cost per install (%s; otad's medians, the decodes once)\n", res.p.name, where)
	fmt.Fprintf(out, row, "install or decode", "wall", "CPU", "peak RSS")
	for _, r := range []*installRow{res.stream, res.delta} {
		if r.skipped() == "" {
			fmt.Fprintf(out, row, r.name, fmt.Sprintf("%.2fs", r.wall().Seconds()), fmt.Sprintf("%.2fs", r.cpu().Seconds()), fmt.Sprintf("%.1f MiB", mib(r.peakRSS())))
		}
	}
	for _, d := range res.decodes {
		fmt.Fprintf(out, row, d.Name, fmt.Sprintf("%.2fs", d.Wall.Seconds()), fmt.Sprintf("%.2fs", d.CPU.Seconds()), fmt.Sprintf("%.1f MiB", mib(d.PeakRSS)))
	}
	if res.stream.skipped() != "" || res.delta.skipped() != "" {
		return nil
	}
	verdict := ratioVerdict(res.delta.cpu().Seconds()/res.stream.cpu().Seconds(), maxDeltaCPU)
	fmt.Fprintf(out, "  target, CPU of the install with deltas against the stream install's: %s\n\n", verdict)
	if strings.HasPrefix(verdict, "FAIL") {
		return []string{fmt.Sprintf("%s: CPU of the install with deltas against the stream install's %s", res.p.name, verdict)}
	}
	return nil
}

// printResult closes the report: every target met, or the ones missed,
// and what could not be measured.
func printResult(out io.Writer, misses, unmeasured []string) {
	for _, u := range unmeasured {
		fmt.Fprintf(out, "NOT MEASURED: %s\n", u)
	}
	if len(misses) == 0 {
		fmt.Fprintln(out, "RESULT: PASS (all targets measured met)")
		return
	}
	fmt.Fprintf(out, "RESULT: FAIL (%d):\n", len(misses))
	for _, m := range misses {
		fmt.Fprintf(out, "  - %s\n", m)
	}
}

// printInstalls prints each install's wall time, throughput and peak RSS
// against the stream install's in the same run, with the targets; it
// returns the targets missed.
func printInstalls(out io.Writer, res *pairResult, rounds int) []string {
	fmt.Fprintf(out, "%s: installs of the new image, %d rounds (wall time and CPU medians, peak RSS the largest), against the stream install\n",
		res.p.name, rounds)
	const row = "  %-32s %8s %8s %9s %10s %9s %8s  %-24s %s\n"
	fmt.Fprintf(out, row, "install", "wall", "MiB/s", "vs stream", "peak RSS", "vs stream", "CPU", "target", "result")
	base := res.stream
	var misses []string
	for _, r := range res.installs {
		if r.skipped() != "" {
			fmt.Fprintf(out, "  %-32s %s\n", r.name, r.skipped())
			if r.failed != "" {
				misses = append(misses, fmt.Sprintf("%s: %s failed: %s", res.p.name, r.name, firstLine(r.failed)))
			}
			continue
		}
		// Against a stream install that failed there is no ratio.
		speed, vsSpeed, vsRSS := 0.0, "-", "-"
		if len(base.samples) > 0 {
			speed = base.wall().Seconds() / r.wall().Seconds()
			vsSpeed = fmt.Sprintf("%.2fx", speed)
			vsRSS = fmt.Sprintf("%.2fx", float64(r.peakRSS())/float64(base.peakRSS()))
		}
		target := fmt.Sprintf("RSS ≤ %.0f MiB", mib(maxRSS))
		var missed []string
		if r.minRatio > 0 {
			target = fmt.Sprintf("≥ %.2fx, ", r.minRatio) + target
			if vsSpeed != "-" && speed < r.minRatio {
				missed = append(missed, fmt.Sprintf("throughput %.2fx < %.2fx", speed, r.minRatio))
			}
		}
		if r.peakRSS() > maxRSS {
			missed = append(missed, fmt.Sprintf("RSS %.2f MiB > %.0f MiB", mib(r.peakRSS()), mib(maxRSS)))
		}
		result := "PASS"
		if len(missed) > 0 {
			result = "FAIL (" + strings.Join(missed, ", ") + ")"
			misses = append(misses, fmt.Sprintf("%s: %s %s", res.p.name, r.name, result))
		}
		fmt.Fprintf(out, row, r.name, fmt.Sprintf("%.2fs", r.wall().Seconds()), fmt.Sprintf("%.1f", mib(res.newSize)/r.wall().Seconds()),
			vsSpeed, fmt.Sprintf("%.1f MiB", mib(r.peakRSS())), vsRSS,
			fmt.Sprintf("%.2fs", r.cpu().Seconds()), target, result)
	}
	fmt.Fprintln(out)
	return misses
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
