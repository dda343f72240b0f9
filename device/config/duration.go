package config

import (
	"fmt"
	"strings"
	"time"
)

// Duration reads "15s", "5m" from TOML strings.
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return &durationError{text: string(b)}
	}
	d.Duration = v
	return nil
}

// durationError is a value that is not a duration; Decode finds the key
// and line of one go-toml returns without them (bareDuration).
type durationError struct{ text string }

func (e *durationError) Error() string {
	return fmt.Sprintf("not a duration (like \"15s\" or \"5m\"): %q", e.text)
}

// MarshalText writes the duration back, as the config is written ("5m").
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// String is the duration as a config file writes it: "5m", "1h30m",
// "250ms", not time.Duration's "5m0s".
func (d Duration) String() string { return FormatDuration(d.Duration) }

// FormatDuration writes d without time.Duration's trailing zero units.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// durationRange is the values a duration key accepts; zero in the file is
// its default (defaults fills it in before the check).
type durationRange struct {
	key      string
	d        time.Duration
	min, max time.Duration
}

// durationRanges are every duration key's bounds (docs/contract/config.md):
// a negative one would turn a grace into a penalty or a pause into none,
// and an endless one would wait for ever.
func (c *Config) durationRanges() []durationRange {
	return []durationRange{
		{"trust.clock_skew", c.Trust.ClockSkew.Duration, time.Second, 24 * time.Hour},
		{"trust.skew_allowance", c.Trust.SkewAllowance.Duration, time.Minute, 7 * 24 * time.Hour},
		{"download.backoff", c.Download.Backoff.Duration, time.Millisecond, time.Hour},
		{"download.max_backoff", c.Download.MaxBackoff.Duration, time.Millisecond, 24 * time.Hour},
		{"commit.window", c.Commit.Window.Duration, time.Second, 24 * time.Hour},
		{"retry.delay", c.Retry.Delay.Duration, time.Second, 24 * time.Hour},
	}
}
