package config

import "time"

// Retry is the [retry] table: the agent's own retries of an offer whose
// download failed (docs/contract/installing.md, docs/contract/config.md).
type Retry struct {
	// Attempts is how many times; 0 turns them off (unset: 3).
	Attempts *int `toml:"attempts"`
	// Delay is the first backoff; each retry doubles it, jittered.
	Delay Duration `toml:"delay"`
}

// Count is Attempts, or its default when unset.
func (r Retry) Count() int {
	if r.Attempts == nil {
		return 3
	}
	return *r.Attempts
}

func (r *Retry) defaults() {
	if r.Attempts == nil {
		n := r.Count()
		r.Attempts = &n
	}
	if r.Delay.Duration == 0 {
		r.Delay.Duration = 15 * time.Second
	}
}

// validate checks Attempts; Delay's range is with the other durations'.
func (r Retry) validate(bad func(key, format string, a ...any)) {
	if n := r.Count(); n < 0 || n > 100 {
		bad("retry.attempts", "%d is not between 0 and 100", n)
	}
}
