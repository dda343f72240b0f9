package rollout

import (
	"math"
	"time"
)

// Pace is a wave's pacing of its offers (a plan's [rate]): a token bucket
// whose rate starts at offers_per_minute when the wave starts offering and
// grows by increase every minute of offering, up to max_per_minute. A
// paused rollout's bucket does not fill, so a pause holds the queue.
type Pace struct {
	PerMinute float64   `json:"per_minute"` // the pace now
	Tokens    float64   `json:"tokens"`     // offers that may go out now
	At        time.Time `json:"at"`         // when Tokens was counted
}

// newPace starts pacing at r's starting pace, with a second's worth of
// offers to send at once.
func newPace(r *Rate, now time.Time) *Pace {
	p := &Pace{PerMinute: r.Start, At: now}
	p.Tokens = p.burst()
	return p
}

// burst is the most the bucket holds: a second's worth at the pace now and
// one offer (so the fraction of an offer a step leaves is not lost). Over
// any span no more than the pace's offers over it and that go out.
func (p *Pace) burst() float64 { return p.PerMinute/60 + 1 }

// refill counts the offers the time since At allows, growing the pace
// as it goes; held (a pause) lets the time pass without any.
func (p *Pace) refill(r *Rate, now time.Time, held bool) {
	// A retained pace comes from outside: hold it to the plan's bounds.
	if !(p.PerMinute >= r.Start) || p.PerMinute > r.Max {
		p.PerMinute = min(r.Max, max(r.Start, p.PerMinute))
		if math.IsNaN(p.PerMinute) {
			p.PerMinute = r.Start
		}
	}
	if !(p.Tokens >= 0) {
		p.Tokens = 0
	}
	p.Tokens = min(p.burst(), p.Tokens)
	dt := now.Sub(p.At)
	if dt <= 0 {
		return
	}
	p.At = now
	if held {
		return
	}
	minutes := dt.Minutes()
	rate := p.PerMinute
	var added float64
	if r.Increase <= 1 || rate >= r.Max {
		added = rate * minutes
	} else {
		k := math.Log(r.Increase)
		// Minutes until the pace reaches its ceiling.
		toMax := math.Log(r.Max/rate) / k
		grow := min(minutes, toMax)
		// The integral of rate × increase^t over [0, grow].
		added = rate * (math.Exp(k*grow) - 1) / k
		rate = min(r.Max, rate*math.Exp(k*grow))
		if minutes > toMax {
			added += r.Max * (minutes - toMax)
			rate = r.Max
		}
	}
	p.PerMinute = rate
	p.Tokens = min(p.burst(), p.Tokens+added)
}

// take spends up to n offers and returns how many it may send.
func (p *Pace) take(n int) int {
	k := min(n, int(p.Tokens))
	p.Tokens -= float64(k)
	return k
}

// Allowed is how many offers rate allows in the first d of a wave's
// offering, beside the bucket's start (a second's worth and one): the
// integral of the pace, which starts at rate.Start and is multiplied by
// rate.Increase every minute up to rate.Max.
func Allowed(rate Rate, d time.Duration) float64 {
	t := d.Minutes()
	if t <= 0 {
		return 0
	}
	if rate.Increase <= 1 || rate.Start >= rate.Max {
		return rate.Start * t
	}
	k := math.Log(rate.Increase)
	toMax := math.Log(rate.Max/rate.Start) / k
	if t <= toMax {
		return rate.Start / k * (math.Exp(k*t) - 1)
	}
	return rate.Start/k*(rate.Max/rate.Start-1) + rate.Max*(t-toMax)
}
