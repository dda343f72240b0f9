package main

import "testing"

func TestProcs(t *testing.T) {
	for _, c := range []struct {
		env       string
		now, want int
	}{
		{"", 1, 2}, // one CPU: a second P for the writer
		{"", 2, 2},
		{"", 4, 4},
		{"1", 1, 1}, // the operator's word stands
		{"3", 3, 3},
	} {
		if got := procs(c.env, c.now); got != c.want {
			t.Errorf("procs(%q, %d) = %d, want %d", c.env, c.now, got, c.want)
		}
	}
}
