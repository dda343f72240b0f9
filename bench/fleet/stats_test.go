package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * time.Millisecond // 100..1, reversed: it must sort
	}
	cases := []struct {
		name string
		xs   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"min", ms(5, 1, 3), 0, 1 * time.Millisecond},
		{"max", ms(5, 1, 3), 100, 5 * time.Millisecond},
		{"median odd", ms(5, 1, 3), 50, 3 * time.Millisecond},
		// Nearest rank: the lower middle value, never an average of two.
		{"median even", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p50 of 1..100", hundred, 50, 50 * time.Millisecond},
		{"p90 of 1..100", hundred, 90, 90 * time.Millisecond},
		{"p99 of 1..100", hundred, 99, 99 * time.Millisecond},
		{"p99 of 10", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"p90 of 10", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := append([]time.Duration(nil), c.xs...)
			if got := percentile(c.xs, c.p); got != c.want {
				t.Fatalf("percentile(%v, %v) = %v, want %v", c.xs, c.p, got, c.want)
			}
			if fmt.Sprint(in) != fmt.Sprint(c.xs) {
				t.Fatalf("percentile reordered its input: %v", c.xs)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	s := summarize([]time.Duration{4 * time.Millisecond, time.Millisecond, 10 * time.Millisecond, 5 * time.Millisecond})
	want := summary{N: 4, Min: time.Millisecond, P50: 4 * time.Millisecond, P90: 10 * time.Millisecond,
		P99: 10 * time.Millisecond, Max: 10 * time.Millisecond, Mean: 5 * time.Millisecond}
	if s != want {
		t.Fatalf("summarize = %+v, want %+v", s, want)
	}
	if s := summarize(nil); s != (summary{}) {
		t.Fatalf("summarize(nil) = %+v", s)
	}
}

func TestParseAgents(t *testing.T) {
	cases := []struct {
		in   string
		want string
		err  string
	}{
		{"100,250,500", "[100 250 500]", ""},
		{" 100 , 1000", "[100 1000]", ""},
		{"", "[]", ""},
		{"100,100", "", "growing"},
		{"500,100", "", "growing"},
		{"0", "", "1 to 100000"},
		{"10,x", "", "1 to 100000"},
		{"10,", "", "1 to 100000"},
	}
	for _, c := range cases {
		got, err := parseAgents(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseAgents(%q) error %v, want one saying %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != c.want {
			t.Errorf("parseAgents(%q) = %v, %v; want %s", c.in, got, err, c.want)
		}
	}
}

const sampleStatus = `Name:	fleetbench
Umask:	0022
State:	S (sleeping)
VmPeak:	 1234567 kB
VmHWM:	   40960 kB
VmRSS:	   20480 kB
Threads:	12
`

func TestParseProcStatus(t *testing.T) {
	cases := []struct {
		name string
		in   string
		keys []string
		want map[string]int64
		err  string
	}{
		{"rss and hwm", sampleStatus, []string{"VmRSS", "VmHWM"}, map[string]int64{"VmRSS": 20480 << 10, "VmHWM": 40960 << 10}, ""},
		{"missing key left out", sampleStatus, []string{"VmSwap"}, map[string]int64{}, ""},
		{"other lines not read", "Threads:\tmany\nVmRSS:\t1 kB\n", []string{"VmRSS"}, map[string]int64{"VmRSS": 1024}, ""},
		{"no unit", "VmRSS:\t20480\n", []string{"VmRSS"}, nil, "VmRSS"},
		{"bad number", "VmRSS:\tx kB\n", []string{"VmRSS"}, nil, "VmRSS"},
		{"overflow", "VmRSS:\t99999999999999999 kB\n", []string{"VmRSS"}, nil, "VmRSS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseProcStatus(strings.NewReader(c.in), c.keys...)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

// The status file comes from outside this program: any bytes give a result
// or an error, never a panic or a negative size.
func FuzzParseProcStatus(f *testing.F) {
	f.Add(sampleStatus)
	f.Add("VmRSS:\t\n")
	f.Add("VmRSS: 1 kB extra\n:")
	f.Fuzz(func(t *testing.T, in string) {
		m, err := parseProcStatus(strings.NewReader(in), "VmRSS", "VmHWM")
		if err != nil {
			return
		}
		for k, v := range m {
			if v < 0 {
				t.Fatalf("%s = %d", k, v)
			}
		}
	})
}

func FuzzParseAgents(f *testing.F) {
	f.Add("100,250,500")
	f.Add("1")
	f.Add(",,")
	f.Fuzz(func(t *testing.T, in string) {
		ns, err := parseAgents(in)
		if err != nil {
			return
		}
		for i, n := range ns {
			if n < 1 || (i > 0 && n <= ns[i-1]) {
				t.Fatalf("parseAgents(%q) = %v", in, ns)
			}
		}
	})
}
