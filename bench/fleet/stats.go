package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// percentile is the nearest-rank percentile (p in 0..100) of xs: a value
// that was measured, never an interpolation between two. 0 for no samples.
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s))/100)) - 1 // multiply first: 0.9*10 is not exactly 9
	return s[min(max(i, 0), len(s)-1)]
}

// summary is the spread of a set of durations.
type summary struct {
	N                       int
	Min, P50, P90, P99, Max time.Duration
	Mean                    time.Duration
}

func summarize(xs []time.Duration) summary {
	s := summary{N: len(xs)}
	if len(xs) == 0 {
		return s
	}
	var sum time.Duration
	for _, x := range xs {
		sum += x
	}
	s.Mean = sum / time.Duration(len(xs))
	s.Min, s.P50, s.P90, s.P99, s.Max = percentile(xs, 0), percentile(xs, 50), percentile(xs, 90), percentile(xs, 99), percentile(xs, 100)
	return s
}

// parseAgents reads "100,250,500": fleet sizes, each positive, growing.
func parseAgents(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var ns []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 100000 {
			return nil, fmt.Errorf("%q: want fleet sizes from 1 to 100000 separated by commas", f)
		}
		if len(ns) > 0 && n <= ns[len(ns)-1] {
			return nil, fmt.Errorf("%d after %d: want growing fleet sizes", n, ns[len(ns)-1])
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// parseProcStatus reads the "Key:   123 kB" lines of /proc/PID/status and
// returns the wanted keys in bytes; keys it does not find are left out.
func parseProcStatus(r io.Reader, keys ...string) (map[string]int64, error) {
	out := make(map[string]int64, len(keys))
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || !slices.Contains(keys, k) {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return nil, fmt.Errorf("%s: %q: want a number of kB", k, strings.TrimSpace(v))
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64>>10 {
			return nil, fmt.Errorf("%s: %q: want a number of kB", k, f[0])
		}
		out[k] = n << 10
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// ms shows a duration in milliseconds with two decimals: latencies here are
// a few milliseconds, and time.Duration's String jumps between units.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
