package rollout

import (
	"fmt"
	"time"
)

// Bounds on what the fleet side reads from a broker (docs/contract/rollouts.md,
// reads are bounded): any client that may publish under {prefix}/rollouts/
// can write a state, a record or a command, so every count, list and
// duration in one is checked where it is decoded, before anything loops
// over it or waits for it.
const (
	// MaxLeaseTTL is the longest lease a controller takes (--lease) and
	// the longest a reader waits out.
	MaxLeaseTTL = 10 * time.Minute
	// MaxCount bounds every device count in a state: far above any fleet.
	MaxCount = 100_000_000
	// maxText bounds a reason, a holder, an event or a command's words.
	maxText = 1024
	// maxIDLen bounds a command's ID.
	maxIDLen = 64
)

// BoundsError names the field of a message read from a broker that is out
// of its bounds, and the bound.
type BoundsError struct {
	Field string
	Value any
	Limit string
}

func (e *BoundsError) Error() string {
	return fmt.Sprintf("%s %v out of bounds: %s", e.Field, e.Value, e.Limit)
}

// bounds is nil when every count, list and duration of s is within the
// contract's limits.
func (s State) bounds() error {
	out := func(field string, v any, format string, args ...any) error {
		return &BoundsError{Field: field, Value: v, Limit: fmt.Sprintf(format, args...)}
	}
	switch {
	case len(s.Name) > maxNameLen:
		return out("name", len(s.Name), "at most %d characters", maxNameLen)
	case s.WaveCount < 1 || s.WaveCount > maxWaves:
		return out("wave_count", s.WaveCount, "a plan has 1 to %d waves", maxWaves)
	case len(s.Waves) > s.WaveCount:
		return out("waves", len(s.Waves), "at most wave_count (%d)", s.WaveCount)
	case s.Wave < 0 || s.Wave > s.WaveCount:
		return out("wave", s.Wave, "0 to wave_count (%d)", s.WaveCount)
	case len(s.History) > maxHistory:
		return out("history", len(s.History), "at most %d entries", maxHistory)
	case s.Records < 0 || s.Records > MaxCount:
		return out("records", s.Records, "0 to %d", MaxCount)
	case s.Accepted < 0 || s.Accepted > MaxCount:
		return out("accepted", s.Accepted, "0 to %d", MaxCount)
	case len(s.Reason) > maxText:
		return out("reason", len(s.Reason), "at most %d bytes", maxText)
	}
	if err := s.Counts.bounds("counts"); err != nil {
		return err
	}
	for i, w := range s.Waves {
		f := fmt.Sprintf("waves[%d]", i)
		switch {
		case w.Chosen < 0 || w.Chosen > MaxCount:
			return out(f+".chosen", w.Chosen, "0 to %d", MaxCount)
		case w.Queued < 0 || w.Queued > MaxCount:
			return out(f+".queued", w.Queued, "0 to %d", MaxCount)
		}
		if p := w.Pace; p != nil && (!(p.PerMinute >= 0 && p.PerMinute <= maxRate) || !(p.Tokens >= 0 && p.Tokens <= maxRate)) {
			return out(f+".pace", fmt.Sprintf("%v/%v", p.PerMinute, p.Tokens), "per_minute and tokens within 0 to %v", float64(maxRate))
		}
		if err := w.Counts.bounds(f + ".counts"); err != nil {
			return err
		}
	}
	for i, c := range s.History {
		if len(c.Event) > maxText {
			return out(fmt.Sprintf("history[%d].event", i), len(c.Event), "at most %d bytes", maxText)
		}
	}
	if l := s.Lease; l != nil {
		switch {
		case l.TTLMS <= 0 || l.TTL() > MaxLeaseTTL:
			return out("lease.ttl_ms", l.TTLMS, "1 to %d (%v)", MaxLeaseTTL.Milliseconds(), MaxLeaseTTL)
		case len(l.Holder) > maxText:
			return out("lease.holder", len(l.Holder), "at most %d bytes", maxText)
		case l.PID < 0 || l.PID > 1<<22:
			return out("lease.pid", l.PID, "0 to %d", 1<<22)
		}
	}
	return nil
}

// bounds is nil when every count is within 0..MaxCount and the outcomes
// and pending add up to no more than the devices offered.
func (c Counts) bounds(field string) error {
	sum := 0
	for _, p := range []struct {
		name string
		n    int
	}{
		{"devices", c.Devices}, {"pending", c.Pending}, {"success", c.Success}, {"up_to_date", c.UpToDate},
		{"failed", c.Failed}, {"rolled_back", c.RolledBack}, {"rejected", c.Rejected},
		{"superseded", c.Superseded}, {"timed_out", c.TimedOut},
	} {
		if p.n < 0 || p.n > MaxCount {
			return &BoundsError{Field: field + "." + p.name, Value: p.n, Limit: fmt.Sprintf("0 to %d", MaxCount)}
		}
		if p.name != "devices" {
			sum += p.n
		}
	}
	if sum > c.Devices {
		return &BoundsError{Field: field, Value: sum, Limit: fmt.Sprintf("pending and outcomes add up to at most devices (%d)", c.Devices)}
	}
	return nil
}

// bounds is nil when a command's ID and words are within their limits.
func (c Command) bounds() error {
	switch {
	case len(c.ID) > maxIDLen:
		return &BoundsError{Field: "id", Value: len(c.ID), Limit: fmt.Sprintf("at most %d characters", maxIDLen)}
	case len(c.Reason) > maxText:
		return &BoundsError{Field: "reason", Value: len(c.Reason), Limit: fmt.Sprintf("at most %d bytes", maxText)}
	case len(c.By) > maxText:
		return &BoundsError{Field: "by", Value: len(c.By), Limit: fmt.Sprintf("at most %d bytes", maxText)}
	}
	return nil
}
