package crashstate

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strings"
)

// Sector is the unit a torn write is cut at (and, within the last sector
// of a write, at a few bytes).
const Sector = 512

// Model is the persistence model a state is built under. After a power cut
// at point k of a trace (ops 0..k-1 issued):
//   - a write is kept if a sync of its inode followed it before k; a
//     creation, rename or removal if a sync of its directory did;
//   - every other operation is pending: dropped, kept, or (a write) kept in
//     part. The states are: none kept, all kept, each prefix in order, up
//     to Subsets seeded subsets, and each prefix whose last write is torn at
//     up to Tears cut points (sector boundaries, and bytes within its last
//     sector).
//
// A pending rename kept without the creation of its source is a no-op, as
// is a removal of what is not there.
type Model struct {
	Subsets int
	Tears   int
	Seed    uint64
}

// ShortModel is the model of make test's sample; FullModel make crash's.
func ShortModel() Model { return Model{Subsets: 8, Tears: 16, Seed: 21} }

// FullModel tears each write at every sector boundary (up to 64 of them).
func FullModel() Model { return Model{Subsets: 16, Tears: 64, Seed: 21} }

// State is one state of the storage after a power cut: at point K, with the
// pending operations Keep (indexes into the trace) kept, the last of them
// cut to Torn bytes when Torn >= 0.
type State struct {
	K    int
	Keep []int
	Torn int
	// edge is the state with none or all of the pending operations kept:
	// a sample always explores those of every point.
	edge bool
}

func (s State) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cut before op %d, pending kept %v", s.K, s.Keep)
	if s.Torn >= 0 {
		fmt.Fprintf(&b, ", the last torn after %d bytes", s.Torn)
	}
	return b.String()
}

// cover[i] is the first point at which op i is durable: the index of the
// first sync after it that covers it; len(ops)+1 when none does. Ops
// without an effect on storage are durable at once.
func cover(ops []Op) []int {
	c := make([]int, len(ops))
	never := len(ops) + 1
	for i, op := range ops {
		switch op.Kind {
		case OpWrite:
			c[i] = never
			for j := i + 1; j < len(ops); j++ {
				if ops[j].Kind == OpSync && ops[j].Inode == op.Inode {
					c[i] = j + 1
					break
				}
			}
		case OpCreate, OpRename, OpRemove:
			c[i] = 0
			for _, d := range op.dirs() {
				at := never
				for j := i + 1; j < len(ops); j++ {
					if ops[j].Kind == OpSyncDir && ops[j].Dir == d {
						at = j + 1
						break
					}
				}
				c[i] = max(c[i], at)
			}
		default:
			c[i] = i + 1
		}
	}
	return c
}

// pending lists the ops before k that are not durable at k.
func pending(cov []int, k int) []int {
	var p []int
	for i := range k {
		if cov[i] > k {
			p = append(p, i)
		}
	}
	return p
}

// States lists the states of the model at every point of ops, in order of
// points (Walk builds them). Duplicates (different choices that build the
// same bytes) are left for the explorer to find.
func (m Model) States(ops []Op) []State {
	cov := cover(ops)
	var out []State
	for k := 0; k <= len(ops); k++ {
		if k > 0 && ops[k-1].Kind == OpMark {
			continue // nothing changed since the point before
		}
		out = append(out, m.at(ops, cov, k)...)
	}
	return out
}

func (m Model) at(ops []Op, cov []int, k int) []State {
	p := pending(cov, k)
	out := []State{{K: k, Torn: -1, edge: true}}
	for n := 1; n <= len(p); n++ {
		out = append(out, State{K: k, Keep: p[:n], Torn: -1, edge: n == len(p)})
	}
	if len(p) > 2 {
		r := rand.New(rand.NewPCG(m.Seed, uint64(k)))
		seen := map[string]bool{}
		for range 4 * m.Subsets {
			if len(seen) == m.Subsets {
				break
			}
			var keep []int
			for _, i := range p {
				if r.IntN(2) == 1 {
					keep = append(keep, i)
				}
			}
			if len(keep) == 0 || len(keep) == len(p) || isPrefix(keep, p) || seen[fmt.Sprint(keep)] {
				continue
			}
			seen[fmt.Sprint(keep)] = true
			out = append(out, State{K: k, Keep: keep, Torn: -1})
		}
	}
	for n := 1; n <= len(p); n++ {
		last := ops[p[n-1]]
		if last.Kind != OpWrite {
			continue
		}
		for _, c := range tearPoints(len(last.Data), m.Tears) {
			out = append(out, State{K: k, Keep: p[:n], Torn: c})
		}
	}
	return out
}

func isPrefix(a, b []int) bool { return len(a) <= len(b) && slices.Equal(a, b[:len(a)]) }

// tearPoints are where a write of n bytes may be cut: sector boundaries
// (at most limit of them, evenly spread, the last always among them), and
// bytes within its first sector (where a small record such as an env's
// header and variables lies) and within its last.
func tearPoints(n, limit int) []int {
	var bounds []int
	for c := Sector; c < n; c += Sector {
		bounds = append(bounds, c)
	}
	if len(bounds) > limit && limit > 0 {
		picked := make([]int, 0, limit)
		for i := range limit {
			picked = append(picked, bounds[(len(bounds)-1)*(i+1)/limit])
		}
		bounds = slices.Compact(picked)
	}
	for _, c := range []int{1, 5, 64, 256} {
		if c < min(n, Sector) {
			bounds = append(bounds, c)
		}
	}
	last := (n - 1) / Sector * Sector
	for _, c := range []int{last + 1, last + (n-last)/2, n - 1} {
		if c > last && c < n {
			bounds = append(bounds, c)
		}
	}
	slices.Sort(bounds)
	return slices.Compact(bounds)
}

// Walk builds every state of the model at every point of ops, in order of
// points, and hands each to yield with what builds its image (a sample
// builds only the states it takes) until yield returns false.
//
// The operations durable at a point are applied to one image kept from
// point to point: an operation, once durable, stays so, and one that
// becomes durable later never precedes, on the same inode or directory,
// one that became durable before (the sync that covers the later covers
// it too), so applying them in the order they become durable builds what
// replaying the trace in order builds. A state's pending operations come
// after all of those for the same reason.
func (m Model) Walk(initial *Image, ops []Op, seed maphash.Seed, yield func(State, func() *Image) bool) {
	cov := cover(ops)
	base := initial.clone()
	for k := 0; k <= len(ops); k++ {
		for i := range k {
			if cov[i] == k && ops[i].Kind != OpMark {
				base.apply(ops[i], -1)
			}
		}
		if k > 0 && ops[k-1].Kind == OpMark {
			continue
		}
		base.hashes(seed) // once here, not in each state's clone
		for _, s := range m.at(ops, cov, k) {
			if !yield(s, func() *Image { return s.build(base, ops) }) {
				return
			}
		}
	}
}

// build is base (the operations durable at s.K) with s's pending ones kept.
func (s State) build(base *Image, ops []Op) *Image {
	img := base.clone()
	base.disown()
	for n, i := range s.Keep {
		cut := -1
		if n == len(s.Keep)-1 {
			cut = s.Torn
		}
		img.apply(ops[i], cut)
	}
	return img
}
