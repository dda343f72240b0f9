package rollout

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"math"
	"slices"
)

// rank places a device in a rollout's stable order: the SHA-256 of the
// rollout name and the device ID. It depends on nothing else, so any
// controller, restarted or on another machine, orders a group the same way,
// and a device's place differs between rollouts (the same devices are not
// always first).
func rank(rollout, device string) [sha256.Size]byte {
	return sha256.Sum256([]byte(rollout + "\x00" + device))
}

// Order returns devices in the rollout's stable order (a new slice).
func Order(rollout string, devices []string) []string {
	type ranked struct {
		r  [sha256.Size]byte
		id string
	}
	rs := make([]ranked, len(devices))
	for i, d := range devices {
		rs[i] = ranked{rank(rollout, d), d}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if c := bytes.Compare(a.r[:], b.r[:]); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.id
	}
	return out
}

// GroupDevices lists the devices of the view whose status names the group,
// sorted by ID.
func GroupDevices(v View, group string) []string {
	var out []string
	for id, st := range v.Devices {
		if slices.Contains(st.Groups, group) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Members chooses the devices wave i (0-based) adds, given the group's
// devices as seen now and the devices earlier waves took.
//
// A named wave takes its names. A percent wave is cumulative over the whole
// group: after it, ceil(percent × N / 100) devices have been offered, where N
// counts the group's devices and every device already taken. It adds the
// shortfall, in the rollout's stable order, from the group's devices that
// no wave names and no earlier wave took. So with 500 devices, a 2-device
// canary, 10% then 100%: 2, then 48, then the other 450.
func Members(p *Plan, i int, group []string, taken map[string]bool) []string {
	w := p.Waves[i]
	if w.Devices != nil {
		return append([]string(nil), w.Devices...)
	}
	named := map[string]bool{}
	for _, w := range p.Waves {
		for _, d := range w.Devices {
			named[d] = true
		}
	}
	var pool []string
	n := len(taken)
	for _, d := range group {
		if !taken[d] {
			n++
			if !named[d] {
				pool = append(pool, d)
			}
		}
	}
	want := n
	if w.Percent < 100 {
		// The small epsilon keeps 10% of 500 at 50 when the float product
		// lands a hair above an integer.
		want = int(math.Ceil(w.Percent*float64(n)/100 - 1e-9))
	}
	add := want - len(taken)
	if add <= 0 {
		return nil
	}
	pool = Order(p.Name, pool)
	if add > len(pool) {
		add = len(pool)
	}
	return pool[:add]
}
