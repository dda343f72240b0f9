package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/otad/otad/internal/testkit/signer"
)

// installHow is how a row runs: read-back on or off, on every core or
// pinned to one (a one-core device's view: the network, the decoder, the
// hash and the writer share it).
type installHow struct {
	readback bool
	cpus     string // taskset -c CPUS; "" is every core
}

// hows are every row's four ways, in the table's order.
var hows = []installHow{{false, ""}, {true, ""}, {false, "0"}, {true, "0"}}

func (h installHow) String() string {
	s := "readback " + onOff(h.readback)
	if h.cpus != "" {
		s += ", 1 core"
	}
	return s
}

// target is the row's throughput target against its ideal: none pinned,
// where the issue asks only to see it.
func (h installHow) target() float64 {
	if h.cpus != "" {
		return 0
	}
	return minRatioReadbackOff
}

// idealKey names one ideal row.
type idealKey struct {
	kind string
	how  installHow
}

// streamRows are the ideal rows of every kind and way (ideals, to hold
// installs against), the stream installs of every kind and way by -otad,
// and by -before when given. The first row is the ideal of the raw
// payload, readback off: the rounds' and the table's base.
func streamRows(o options, dev *testDevice, kinds []kind, url func(kind) string) (rows []*phase, ideals map[idealKey]*phaseStats, err error) {
	ideals = map[idealKey]*phaseStats{}
	envelopes := map[string]string{}
	for _, k := range kinds {
		env := dev.envelope
		if k.name != "raw" {
			if env, err = dev.sign(signer.Offer{ID: "installbench-" + k.name, Version: "bench-1", SecurityVersion: 1, Compatible: compatible,
				URL: url(k), Compression: k.compression, Size: o.size, SHA256: dev.sum}, k.name); err != nil {
				return nil, nil, err
			}
		}
		envelopes[k.name] = env
		for _, h := range hows {
			st := &phaseStats{name: fmt.Sprintf("ideal %s, %s", k.name, h)}
			ideals[idealKey{k.name, h}] = st
			rows = append(rows, &phase{stats: st, install: true, run: func(context.Context, int) (sample, error) {
				return ideal(k, dev.slotB, o.size, dev.sum, h.readback, h.cpus != "")
			}})
		}
	}
	for _, b := range binaries(o) {
		for _, k := range kinds {
			for _, h := range hows {
				st := &phaseStats{name: fmt.Sprintf("%s stream %s, %s", b.label, k.name, h), ref: ideals[idealKey{k.name, h}]}
				if b.bin == o.otad {
					st.minRatio, st.maxRSS = h.target(), maxStreamRSS
				}
				rows = append(rows, &phase{stats: st, install: true, run: func(ctx context.Context, _ int) (sample, error) {
					if err := dev.reset(); err != nil {
						return sample{}, err
					}
					return runOtad(ctx, h.cpus, b.bin, dev.cfg[h.readback], envelopes[k.name], nil)
				}})
			}
		}
	}
	return rows, ideals, nil
}

// labelledBinary is an otad binary and its rows' label.
type labelledBinary struct{ label, bin string }

// binaries are the otad binaries whose installs the rows run: -otad, and
// -before when given.
func binaries(o options) []labelledBinary {
	bins := []labelledBinary{{"otad", o.otad}}
	if o.before != "" {
		bins = append(bins, labelledBinary{"before", o.before})
	}
	return bins
}

// servedURL is the URL the bench's file server gives a file of the work
// directory.
func servedURL(base string) func(kind) string {
	return func(k kind) string { return base + "/" + filepath.Base(k.path) }
}
