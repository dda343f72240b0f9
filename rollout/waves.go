package rollout

import (
	"cmp"
	"container/heap"
	"slices"

	"github.com/otad/otad/ota"
)

// member is one member of a started wave, as a step sees it.
type member struct {
	wave    int // index into the state's waves
	id      string
	d       Device
	seen    bool   // in the view
	offered bool   // behind the wave's cursor: its offer is out
	rec     Record // its per-device record; zero when none
}

// eachMember calls fn for every member of every started wave: a named
// wave's names, and the group's devices in each percent wave's range.
func (m *machine) eachMember(v View, fn func(mb *member)) {
	s := &m.s
	var spans []int // the percent waves
	rs := make([]span, len(s.Waves))
	for i, w := range s.Waves {
		if w.Kind == WavePercent {
			rs[i] = rangeOf(s.Waves, i)
			spans = append(spans, i)
		}
	}
	named := m.p.named()
	for i, w := range s.Waves {
		if w.Kind != WaveDevices {
			continue
		}
		for _, id := range m.p.Waves[i].Devices {
			d, ok := v.lookup(id)
			if !ok {
				d = Device{Place: PlaceOf(m.p.Name, id)}
			}
			fn(m.memberOf(v, i, id, d, ok))
		}
	}
	if len(spans) == 0 {
		return
	}
	v.each(func(id string, d Device) {
		if !d.InGroup || named[id] != 0 {
			return
		}
		for _, i := range spans {
			if rs[i].has(d.Place) {
				fn(m.memberOf(v, i, id, d, true))
				return
			}
		}
	})
}

func (m *machine) memberOf(v View, i int, id string, d Device, seen bool) *member {
	w := &m.s.Waves[i]
	mb := &member{wave: i, id: id, d: d, seen: seen}
	mb.offered = !w.Offered.IsZero() || (w.Cursor != nil && d.Place <= *w.Cursor)
	if r, ok := m.newRecs[id]; ok {
		mb.rec = r
	} else if r, ok := v.Records[id]; ok {
		mb.rec = r
	}
	return mb
}

// outcome is what came of the offer on an offered member: what its status
// shows (or showed, this run), else what its record kept, else a timeout
// once device_timeout has passed since its wave was offered.
func (m *machine) outcome(mb *member) ota.Result {
	o := mb.d.Outcome
	if o == "" {
		o = mb.rec.Kept
	}
	if w := m.s.Waves[mb.wave]; o == "" && !w.Offered.IsZero() && !m.now.Before(w.Offered.Add(m.p.Halt.DeviceTimeout)) {
		o = TimedOut
	}
	return o
}

// tally counts every wave's devices by outcome from the view and the
// records, and notes what the view newly tells: an outcome a device's
// status no longer shows is recorded (Kept), and, on the first tally of a
// step, a member heard of since the last step, behind its wave's cursor,
// that shows no sign of the offer is queued to be offered again (a device
// that came late, or one a restarted controller cannot tell was offered).
func (m *machine) tally(v View) {
	s := &m.s
	counts := make([]Counts, len(s.Waves))
	queued := make([]int, len(s.Waves))
	first := !m.tallied
	m.tallied, m.acceptedBad = true, 0
	m.eachMember(v, func(mb *member) {
		if !mb.offered {
			queued[mb.wave]++
			return
		}
		o := m.outcome(mb)
		counts[mb.wave].add(o)
		if bad(o) && mb.rec.Accepted != "" {
			m.acceptedBad++
		}
		if !mb.seen {
			return
		}
		if mb.d.Moved && mb.d.Outcome != "" && mb.rec.Kept == "" {
			r := mb.rec
			r.Device, r.Wave, r.Kept, r.Time = mb.id, mb.wave+1, mb.d.Outcome, m.now
			m.record(v, r)
		}
		if first && (s.run.seen.IsZero() || mb.d.Seen.After(s.run.seen)) && mb.d.Outcome == "" && mb.rec.Kept == "" && !mb.d.Working {
			s.run.catchUp = append(s.run.catchUp, catchUp{wave: mb.wave + 1, device: mb.id})
		}
	})
	var all Counts
	for i := range s.Waves {
		s.Waves[i].Counts, s.Waves[i].Queued = counts[i], queued[i]
		all.plus(counts[i])
	}
	s.Counts = all
}

// totals are the counts over all waves and the failures accepted.
type totals struct {
	Counts
	accepted int
}

func (m *machine) totals() totals { return totals{m.s.Counts, m.acceptedBad} }

// accept records, device by device, the failures a resume accepted: a
// later halt judges only the others, so an accepted timeout that turns
// into a success does not make room for a new failure.
func (m *machine) accept(v View) {
	s := &m.s
	if s.Accepting == nil {
		return
	}
	n := 0
	m.eachMember(v, func(mb *member) {
		if !mb.offered {
			return
		}
		if o := m.outcome(mb); bad(o) && mb.rec.Accepted == "" {
			r := mb.rec
			r.Device, r.Wave, r.Accepted, r.Time = mb.id, mb.wave+1, o, m.now
			m.record(v, r)
			n++
		}
	})
	m.note("%s: %d failed devices accepted", s.Accepting.Reason, n)
	s.Accepting = nil
}

// record writes r as its device's record. The state's counts of records
// are taken from the records themselves, so a step tried again after some
// of its records went out counts each once.
func (m *machine) record(v View, r Record) {
	if m.newRecs == nil {
		m.newRecs = map[string]Record{}
	}
	m.newRecs[r.Device] = r
	m.recs = append(m.recs, PublishRecord{Record: r})
	n, accepted := len(v.Records), 0
	for id, r := range v.Records {
		if _, again := m.newRecs[id]; !again && r.Accepted != "" {
			accepted++
		}
	}
	for id, r := range m.newRecs {
		if _, had := v.Records[id]; !had {
			n++
		}
		if r.Accepted != "" {
			accepted++
		}
	}
	m.s.Records, m.s.Accepted = n, accepted
}

// offer asks for the next offers: first devices to offer again, then the
// current wave's next batch in the stable order, each as far as the pace
// allows. A batch asked for and not confirmed is asked for again.
func (m *machine) offer(v View) {
	s := &m.s
	w := m.current()
	if w == nil {
		return
	}
	if m.p.Rate == nil {
		w.Pace = nil
	}
	if w.Pace != nil {
		// Not a change to publish on its own: a restarted controller's
		// bucket is full at most, whatever time it reads.
		w.Pace.refill(m.p.Rate, m.now, m.held())
	}
	if m.held() {
		return
	}
	if q := s.run.catchUp; len(q) > 0 {
		k := min(len(q), maxBatch)
		if w.Pace != nil {
			k = w.Pace.take(k)
		}
		if k > 0 {
			devs := make([]string, k)
			for i, c := range q[:k] {
				devs[i] = c.device
			}
			m.acts = append(m.acts, Offer{Wave: s.Wave, Devices: devs, CatchUp: true})
		}
		return
	}
	if !w.Offered.IsZero() {
		return
	}
	i := s.Wave - 1
	if w.Next != nil {
		m.acts = append(m.acts, Offer{Wave: s.Wave, Devices: m.batch(v, i, maxBatch, w.Next), Through: *w.Next})
		return
	}
	budget := maxBatch
	if w.Pace != nil {
		budget = min(budget, int(w.Pace.Tokens))
		if budget == 0 {
			return
		}
	}
	devs := m.batch(v, i, budget, nil)
	if len(devs) == 0 {
		// Every member seen is offered: timeouts count from now.
		w.Offered, w.Queued = m.now, 0
		end := LastPlace
		if w.Through != nil {
			end = *w.Through
		}
		w.Cursor = &end
		m.note("wave %d offered to %d devices", s.Wave, w.Counts.Devices)
		return
	}
	if w.Pace != nil {
		w.Pace.take(len(devs))
	}
	next := m.placeOf(v, devs[len(devs)-1])
	w.Next = &next
	m.changed = true
	m.acts = append(m.acts, Offer{Wave: s.Wave, Devices: devs, Through: next})
}

func (m *machine) placeOf(v View, id string) Place {
	if d, ok := v.lookup(id); ok {
		return d.Place
	}
	return PlaceOf(m.p.Name, id)
}

// batch is wave i's next members after its cursor in the stable order, at
// most n of them (more only to keep the devices of one place together),
// or, with through set, the members after the cursor up to it.
func (m *machine) batch(v View, i, n int, through *Place) []string {
	h := &placeHeap{}
	m.eachMember(v, func(mb *member) {
		if mb.wave != i || mb.offered || (through != nil && mb.d.Place > *through) {
			return
		}
		e := placed{mb.d.Place, mb.id}
		if through != nil || h.Len() < n {
			heap.Push(h, e)
		} else if e.less((*h)[0]) {
			(*h)[0] = e
			heap.Fix(h, 0)
		}
	})
	out := slices.Clone(*h)
	slices.SortFunc(out, func(a, b placed) int { return a.cmp(b) })
	if through == nil && len(out) == n && n > 0 {
		// Devices at the batch's last place go with it: the cursor moves
		// past that place.
		last := out[n-1].p
		m.eachMember(v, func(mb *member) {
			if mb.wave == i && !mb.offered && mb.d.Place == last && !slices.ContainsFunc(out, func(e placed) bool { return e.id == mb.id }) {
				out = append(out, placed{mb.d.Place, mb.id})
			}
		})
	}
	ids := make([]string, len(out))
	for j, e := range out {
		ids[j] = e.id
	}
	return ids
}

type placed struct {
	p  Place
	id string
}

func (a placed) cmp(b placed) int {
	if c := cmp.Compare(a.p, b.p); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

func (a placed) less(b placed) bool { return a.cmp(b) < 0 }

// placeHeap is a max-heap: its top is the last of the smallest kept.
type placeHeap []placed

func (h placeHeap) Len() int           { return len(h) }
func (h placeHeap) Less(i, j int) bool { return h[j].less(h[i]) }
func (h placeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *placeHeap) Push(x any)        { *h = append(*h, x.(placed)) }
func (h *placeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// offered moves the cursor to in.Through: all of the batch, or the part of
// it that went out before the driver had to stop (the rest is asked for
// again).
func (m *machine) offered(in Offered) {
	w := m.current()
	if in.Wave != m.s.Wave || w == nil || w.Next == nil || in.Through > *w.Next || (w.Cursor != nil && in.Through <= *w.Cursor) {
		return
	}
	through := in.Through
	w.Cursor = &through
	if through == *w.Next {
		w.Next = nil
	}
	m.changed = true
}

func (m *machine) caughtUp(n int) {
	q := m.s.run.catchUp
	m.s.run.catchUp = q[min(n, len(q)):]
}
