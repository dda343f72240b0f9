package rollout

import "fmt"

// rateError names the [rate] key at fault.
type rateError struct {
	key string
	err error
}

// maxRate bounds every rate: a million offers a minute is more than one
// controller publishes (bench/rollout), and keeps the arithmetic finite.
const maxRate = 1e6

func checkRate(f rateFile) (*Rate, *rateError) {
	bad := func(key, format string, args ...any) (*Rate, *rateError) {
		return nil, &rateError{key, fmt.Errorf(format, args...)}
	}
	inRange := func(v float64) bool { return v > 0 && v <= maxRate }
	if f.OffersPerMinute == nil {
		return bad("offers_per_minute", "missing: [rate] needs the starting pace")
	}
	r := &Rate{Start: *f.OffersPerMinute, Increase: 1}
	if !inRange(r.Start) {
		return bad("offers_per_minute", "%v is not in (0, %v]", r.Start, float64(maxRate))
	}
	if f.Increase != nil {
		r.Increase = *f.Increase
		if !(r.Increase >= 1 && r.Increase <= 100) {
			return bad("increase", "%v is not in [1, 100]: a factor per minute (1 keeps the pace)", r.Increase)
		}
	}
	switch {
	case f.MaxPerMinute != nil:
		r.Max = *f.MaxPerMinute
		if !inRange(r.Max) || r.Max < r.Start {
			return bad("max_per_minute", "%v is not in [offers_per_minute %v, %v]", r.Max, r.Start, float64(maxRate))
		}
	case r.Increase > 1:
		return bad("max_per_minute", "missing: a pace that increases needs a ceiling")
	default:
		r.Max = r.Start
	}
	return r, nil
}
