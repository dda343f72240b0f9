package rollout

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Place is a device's place in a rollout's stable order: the first 8 bytes
// of the SHA-256 of the rollout name, a NUL and the device ID, big-endian.
// It depends on nothing else, so any controller, restarted or on another
// machine, orders a group the same way, and a device's place differs
// between rollouts (the same devices are not always first). A percent
// wave's range is a pair of places, so the state does not grow with the
// group.
type Place uint64

// PlaceOf is device's place in rollout's order.
func PlaceOf(rollout, device string) Place {
	h := sha256.Sum256([]byte(rollout + "\x00" + device))
	return Place(binary.BigEndian.Uint64(h[:8]))
}

// LastPlace is the end of the order: a range through it takes everybody.
const LastPlace = Place(math.MaxUint64)

// String is the place as the state shows it: 16 hex digits.
func (p Place) String() string { return fmt.Sprintf("%016x", uint64(p)) }

// MarshalText writes the place as 16 hex digits.
func (p Place) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads 16 hex digits.
func (p *Place) UnmarshalText(b []byte) error {
	if len(b) != 16 {
		return fmt.Errorf("place %q: want 16 hex digits", b)
	}
	if _, err := hex.DecodeString(string(b)); err != nil {
		return fmt.Errorf("place %q: want 16 hex digits", b)
	}
	v, err := strconv.ParseUint(string(b), 16, 64)
	if err != nil {
		return fmt.Errorf("place %q: %w", b, err)
	}
	*p = Place(v)
	return nil
}

// Order returns devices in the rollout's stable order (a new slice): by
// place, then by ID.
func Order(rollout string, devices []string) []string {
	type placed struct {
		p  Place
		id string
	}
	ps := make([]placed, len(devices))
	for i, d := range devices {
		ps[i] = placed{PlaceOf(rollout, d), d}
	}
	slices.SortFunc(ps, func(a, b placed) int {
		if c := cmp.Compare(a.p, b.p); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.id
	}
	return out
}

// Assign is every wave's members for a group that does not change during
// the rollout, as a controller chooses them (the plan's tests, and people
// who want to know beforehand).
func Assign(p *Plan, group []string) [][]string {
	v := DeviceMap{}
	for _, id := range group {
		v[id] = Device{Place: PlaceOf(p.Name, id), InGroup: true}
	}
	var out [][]string
	var ws []WaveState
	for i := range p.Waves {
		w := startWave(p, ws, i, v)
		ws = append(ws, w)
		out = append(out, members(p, ws, i, v))
	}
	return out
}

// percentTarget is how many devices ⌈percent × n / 100⌉ is. The small
// epsilon keeps 10% of 500 at 50 when the float product lands a hair above
// an integer.
func percentTarget(percent float64, n int) int {
	if percent >= 100 {
		return n
	}
	return int(math.Ceil(percent*float64(n)/100 - 1e-9))
}

// startWave chooses wave i's range (a percent wave) over the devices seen
// now, given the waves started before it.
//
// A named wave takes its names. A percent wave is cumulative over the
// whole group: after it, ⌈percent × N / 100⌉ devices have been taken, N
// counting the group's devices and every device already taken. It takes
// the shortfall, in the stable order, from the group's devices that no wave
// names and no earlier wave took: its range ends at the place of the last
// one it takes. So with 500 devices, a 2-device canary, 10% then 100%: 2,
// then 48, then the other 450.
func startWave(p *Plan, started []WaveState, i int, v Devices) WaveState {
	w := p.Waves[i]
	if w.Devices != nil {
		return WaveState{Kind: WaveDevices, Chosen: len(w.Devices)}
	}
	named := p.named()
	after, hasAfter := lastThrough(started)
	taken := 0
	for j := range started {
		if p.Waves[j].Devices != nil {
			taken += len(p.Waves[j].Devices)
		}
	}
	var pool []Place
	n := taken
	v.Each(func(id string, d Device) {
		if !d.InGroup || named[id] != 0 {
			if d.InGroup && named[id]-1 >= i { // named by a later wave: in the group, not taken yet
				n++
			}
			return
		}
		n++
		if hasAfter && d.Place <= after {
			taken++ // an earlier percent wave's
			return
		}
		pool = append(pool, d.Place)
	})
	add := percentTarget(w.Percent, n) - taken
	ws := WaveState{Kind: WavePercent}
	var through Place
	switch {
	case w.Percent >= 100:
		through, ws.Chosen = LastPlace, len(pool)
	case add <= 0 || len(pool) == 0:
		// It takes nobody: its range is empty (after the previous one's
		// end, through that end), or, for a first percent wave, none.
		if !hasAfter {
			return ws
		}
		through = after
	default:
		slices.Sort(pool)
		k := min(add, len(pool))
		through, ws.Chosen = pool[k-1], k
		for ws.Chosen < len(pool) && pool[ws.Chosen] == through {
			ws.Chosen++ // devices at the same place go together
		}
	}
	ws.Through = &through
	return ws
}

// lastThrough is the end of the last percent wave's range among ws.
func lastThrough(ws []WaveState) (Place, bool) {
	for j := len(ws) - 1; j >= 0; j-- {
		if ws[j].Kind == WavePercent && ws[j].Through != nil {
			return *ws[j].Through, true
		}
	}
	return 0, false
}

// members lists wave i's members among v (a named wave: its names), in
// the stable order.
func members(p *Plan, ws []WaveState, i int, v Devices) []string {
	if names := p.Waves[i].Devices; names != nil {
		return Order(p.Name, names)
	}
	r := rangeOf(ws, i)
	named := p.named()
	var out []string
	v.Each(func(id string, d Device) {
		if d.InGroup && named[id] == 0 && r.has(d.Place) {
			out = append(out, id)
		}
	})
	return Order(p.Name, out)
}

// span is a percent wave's range of places.
type span struct {
	after    Place // exclusive, when hasAfter
	hasAfter bool
	through  Place
	none     bool // an empty range
}

func (r span) has(p Place) bool {
	return !r.none && (!r.hasAfter || p > r.after) && p <= r.through
}

// rangeOf is percent wave i's range among the started waves ws.
func rangeOf(ws []WaveState, i int) span {
	w := ws[i]
	if w.Kind != WavePercent || w.Through == nil {
		return span{none: true}
	}
	after, hasAfter := lastThrough(ws[:i])
	if hasAfter && *w.Through <= after {
		return span{none: true}
	}
	return span{after: after, hasAfter: hasAfter, through: *w.Through}
}

// named maps every device the plan names to its wave (from 1).
func (p *Plan) named() map[string]int {
	if p.namedWave != nil {
		return p.namedWave
	}
	m := map[string]int{}
	for i, w := range p.Waves {
		for _, d := range w.Devices {
			m[d] = i + 1
		}
	}
	return m
}

// WaveMembers lists the members of each wave s has started, in the stable
// order, among the devices of group (IDs of devices that list the plan's
// group): the state records ranges of the order, not names, so who is in
// a wave is asked of a list of devices (the fleet's, a tool's).
func WaveMembers(p *Plan, s State, group []string) [][]string {
	v := DeviceMap{}
	for _, id := range group {
		v[id] = Device{Place: PlaceOf(p.Name, id), InGroup: true}
	}
	out := make([][]string, len(s.Waves))
	for i := range s.Waves {
		if i < len(p.Waves) {
			out[i] = members(p, s.Waves, i, v)
		}
	}
	return out
}
