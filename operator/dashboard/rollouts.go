package dashboard

import (
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/seen"
)

// Rollouts holds every rollout's retained state seen on the broker
// ({prefix}/rollouts/+/state, docs/contract/rollouts.md). It is safe for
// concurrent use.
type Rollouts struct {
	prefix string
	trust  rollout.Trust
	log    *slog.Logger
	mu     sync.Mutex
	states map[string]entry

	// counters keep the highest state counters shown, across restarts
	// (Remember); nil: within this process only.
	counters *seen.Store
	brokers  []string
}

// Remember keeps the highest counter of each rollout's state shown in
// counters, and refuses older states from there: an older signed state
// published again while the dashboard was down is refused after its
// restart too (docs/contract/rollouts.md, a signed control plane). brokers
// are the dashboard's (seen.Key).
func (r *Rollouts) Remember(counters *seen.Store, brokers []string) {
	r.mu.Lock()
	r.counters, r.brokers = counters, brokers
	r.mu.Unlock()
}

type entry struct {
	state rollout.State
	err   string // the state did not decode
}

// NewRollouts follows the rollouts under the topic prefix ("" is "ota"),
// showing only states trust verifies (docs/contract/rollouts.md, a signed
// control plane); log (nil: none) hears of the others.
func NewRollouts(prefix string, trust rollout.Trust, log *slog.Logger) *Rollouts {
	if prefix == "" {
		prefix = mqtt.DefaultTopicPrefix
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Rollouts{prefix: prefix, trust: trust, log: log, states: map[string]entry{}}
}

// Filter is the subscription the rollouts need.
func (r *Rollouts) Filter() string { return mqtt.Topics{Prefix: r.prefix}.RolloutState("+") }

// Observe takes one message and reports whether it was a rollout's state.
// An empty one (the state cleared) forgets the rollout.
func (r *Rollouts) Observe(m mqtt.Message) bool {
	rest, ok := strings.CutPrefix(m.Topic, r.prefix+"/rollouts/")
	name, leaf, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || leaf != "state" || name == "" {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, known := r.states[name]; !known && len(r.states) >= maxRollouts {
		return true // a page of more would be no use; whoever writes them is not a controller
	}
	if err := m.TooLarge("state of rollout " + name); err != nil {
		// Dropped unread: shown as a state that does not decode, never
		// taken for a cleared one (docs/contract/mqtt.md, limits).
		r.states[name] = entry{err: err.Error()}
		return true
	}
	if len(m.Payload) == 0 {
		delete(r.states, name)
		return true
	}
	s, _, err := r.trust.OpenState(m.Topic, m.Payload)
	if errors.Is(err, rollout.ErrForged) {
		// Taken for absent: never shown, never over the state it forges.
		r.log.Warn("dashboard: " + err.Error())
		return false
	}
	if err != nil {
		r.states[name] = entry{err: err.Error()}
		return true
	}
	if old, ok := r.states[name]; ok && old.err == "" && old.state.Newer(s) {
		r.log.Warn("dashboard: replayed state on " + m.Topic + " refused: older than the one shown")
		return false
	}
	key := seen.Key(r.brokers, r.prefix, name)
	if err := r.counters.Check(key, seen.State, m.Topic, s.Counter()); err != nil {
		r.log.Warn("dashboard: " + err.Error())
		return false
	}
	if err := r.counters.Raise(key, seen.State, s.Counter(), s.Terminal()); err != nil {
		r.log.Error("dashboard: the state's counter is not kept: a restart may show an older state", "err", err)
	}
	r.states[name] = entry{state: s}
	return true
}

// RolloutView is one rollout as the page shows it.
type RolloutView struct {
	Name      string           `json:"name"`
	BadState  string           `json:"bad_state,omitempty"` // the retained state did not decode
	Group     string           `json:"group"`
	Offer     rollout.Ref      `json:"offer"`
	Phase     string           `json:"state"`
	Reason    string           `json:"reason"`
	Wave      int              `json:"wave"`
	WaveCount int              `json:"wave_count"`
	Counts    rollout.Counts   `json:"counts"`
	Waves     []WaveView       `json:"waves"`
	Failed    []FailedDevice   `json:"failed"`
	FailedAll int              `json:"failed_total"` // Failed holds at most maxFailed of them
	Pace      float64          `json:"pace"`         // outcomes a minute in the current wave, since it started
	History   []rollout.Change `json:"history"`      // the newest last
	Updated   time.Time        `json:"updated"`
}

// WaveView is one wave of the plan, started or not.
type WaveView struct {
	Number  int            `json:"number"`
	Started bool           `json:"started"`
	Kind    string         `json:"kind"`   // rollout.WaveDevices or WavePercent
	Chosen  int            `json:"chosen"` // members when it started
	Queued  int            `json:"queued"` // members seen, not offered yet
	Counts  rollout.Counts `json:"counts"` // of the members offered
	// PerMinute is the pace of its offers when the plan paces them; 0: not paced.
	PerMinute float64   `json:"per_minute"`
	Offered   time.Time `json:"offered,omitzero"`
	Ended     time.Time `json:"ended,omitzero"`
}

// FailedDevice is a device whose status says the rollout's offer failed
// there (rollout.OutcomeOf), with the device's code and message.
type FailedDevice struct {
	Device  string     `json:"device"`
	Result  ota.Result `json:"result"`
	Code    ota.Code   `json:"code"`
	Message string     `json:"message"`
}

// What a view shows of a rollout: the page stays small whatever the fleet.
const (
	maxFailed  = 100
	maxHistory = 20
	// maxRollouts bounds the rollouts followed: their names come from
	// whoever may write under {prefix}/rollouts/.
	maxRollouts = 1000
)

// Views are the rollouts, by name. Their failed devices come from the
// fleet view: the devices whose status says the rollout's offer failed,
// so they are found whatever the state keeps of its devices.
func (r *Rollouts) Views(fleet *fleetview.View, now time.Time) []RolloutView {
	r.mu.Lock()
	entries := maps.Clone(r.states)
	r.mu.Unlock()
	out := []RolloutView{}
	byOffer := map[rollout.Ref][]int{} // the rollouts releasing each offer
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		e := entries[name]
		if e.err != "" {
			out = append(out, RolloutView{Name: name, BadState: e.err, Waves: []WaveView{}, Failed: []FailedDevice{}, History: []rollout.Change{}})
			continue
		}
		byOffer[e.state.Offer] = append(byOffer[e.state.Offer], len(out))
		out = append(out, view(e.state, now))
	}
	if len(byOffer) == 0 {
		return out
	}
	fleet.Each(func(id string, st ota.Status) {
		for offer, idx := range byOffer {
			o := rollout.OutcomeOf(st, offer)
			if !bad(o.Result) {
				continue
			}
			for _, i := range idx {
				v := &out[i]
				if slices.Contains(st.Groups, v.Group) || v.Group == "" {
					v.FailedAll++
					v.Failed = append(v.Failed, FailedDevice{Device: id, Result: o.Result, Code: o.Code, Message: o.Message})
				}
			}
		}
	})
	for i := range out {
		f := out[i].Failed
		slices.SortFunc(f, func(a, b FailedDevice) int { return strings.Compare(a.Device, b.Device) })
		out[i].Failed = f[:min(len(f), maxFailed)]
	}
	return out
}

func view(s rollout.State, now time.Time) RolloutView {
	v := RolloutView{Name: s.Name, Group: s.Group, Offer: s.Offer, Phase: s.Phase, Reason: s.Reason, Wave: s.Wave,
		WaveCount: s.WaveCount, Counts: s.Counts, Waves: []WaveView{}, Failed: []FailedDevice{}, Updated: s.Updated}
	for i := range max(s.WaveCount, len(s.Waves)) {
		wv := WaveView{Number: i + 1}
		if i < len(s.Waves) {
			w := s.Waves[i]
			wv.Started, wv.Kind, wv.Chosen, wv.Queued, wv.Counts, wv.Offered, wv.Ended = true, w.Kind, w.Chosen, w.Queued, w.Counts, w.Offered, w.Ended
			if w.Pace != nil {
				wv.PerMinute = w.Pace.PerMinute
			}
		}
		v.Waves = append(v.Waves, wv)
	}
	if n := len(s.Waves); n > 0 {
		if w := s.Waves[n-1]; !w.Started.IsZero() {
			end := now
			if !w.Ended.IsZero() {
				end = w.Ended
			}
			if mins := end.Sub(w.Started).Minutes(); mins > 0 {
				v.Pace = float64(w.Counts.Outcomes()) / mins
			}
		}
	}
	v.History = append([]rollout.Change{}, s.History[max(0, len(s.History)-maxHistory):]...) // never null for the page
	return v
}

// bad is an outcome the halt rule counts as failed (rollout.Counts.Bad).
func bad(r ota.Result) bool {
	switch r {
	case ota.ResultFailed, ota.ResultRolledBack, ota.ResultRejected, rollout.TimedOut:
		return true
	}
	return false
}
