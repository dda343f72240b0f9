package fetch

import (
	"time"

	"github.com/otad/otad/backoff"
)

// The retry defaults of docs/contract/config.md ([download] retries,
// backoff, max_backoff).
const (
	defaultAttempts = 3
	defaultBase     = 15 * time.Second
	defaultMax      = 5 * time.Minute
)

// WithRetryDefaults is the retry policy for transient download errors
// (docs/contract/installing.md): up to Attempts tries of a request that
// makes no progress, a full-jitter wait before each retry. A request that
// delivers bytes before failing resets the count, since it resumes from
// there. Zero fields take the defaults: 3 attempts, 15s base, 5m cap; a cap
// below the base is the base.
func WithRetryDefaults(p backoff.Policy) backoff.Policy {
	if p.Attempts <= 0 {
		p.Attempts = defaultAttempts
	}
	if p.Base <= 0 {
		p.Base = defaultBase
	}
	if p.Max <= 0 {
		p.Max = defaultMax
	}
	if p.Max < p.Base {
		p.Max = p.Base
	}
	return p
}
