package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// pacedRun steps a controller once a second over a wave of n devices, as
// the driver does (every batch confirmed and stepped again at once), and
// returns the offers sent in each second. pause and resume are the
// seconds at which an operator pauses and resumes (0: never).
func pacedRun(t *testing.T, p *Plan, n int, seconds int, pause, resume int) ([]int, State) {
	t.Helper()
	devs := make([]string, n)
	for i := range devs {
		devs[i] = fmt.Sprintf("d%04d", i)
	}
	v := view(devs...)
	v.Records = map[string]Record{}
	s := NewState(p, t0)
	per := make([]int, seconds)
	for sec := range seconds {
		now := t0.Add(time.Duration(sec) * time.Second)
		switch {
		case pause > 0 && sec == pause:
			s, _ = Step(s, p, Command{ID: "p", Op: OpPause}, now)
		case resume > 0 && sec == resume:
			s, _ = Step(s, p, Command{ID: "r", Op: OpResume}, now)
		}
		for in := Input(Observe{View: v}); in != nil; {
			var as []Action
			s, as = Step(s, p, in, now)
			in = nil
			for _, a := range as {
				if o, ok := a.(Offer); ok {
					per[sec] += len(o.Devices)
					s, _ = Step(s, p, Offered{Wave: o.Wave, Through: o.Through}, now)
					in = Observe{View: v}
				}
			}
		}
	}
	return per, s
}

// The controller never offers faster than the pace: over any span of t
// seconds, at most the integral of the pace over it plus a second's worth;
// and it keeps to the pace (it does not fall behind by more than a
// second's worth either). A pause holds the queue.
func TestPace(t *testing.T) {
	flat := testPlan(100, 1, Wave{Percent: 100})
	flat.Rate = &Rate{Start: 120, Increase: 1, Max: 120}
	growing := testPlan(100, 1, Wave{Percent: 100})
	growing.Rate = &Rate{Start: 60, Increase: 2, Max: 240}
	// The offers the pace allows in the first t seconds of offering.
	allowed := func(r *Rate, t float64) float64 { return Allowed(*r, time.Duration(t*float64(time.Second))) }
	for _, tc := range []struct {
		name string
		p    *Plan
		secs int
	}{
		{"120 a minute", flat, 120},
		{"60 a minute, doubling every minute up to 240", growing, 240},
	} {
		t.Run(tc.name, func(t *testing.T) {
			per, s := pacedRun(t, tc.p, 2000, tc.secs, 0, 0)
			burst := tc.p.Rate.Max/60 + 1
			total := 0
			for sec, n := range per {
				total += n
				if lim := allowed(tc.p.Rate, float64(sec)) + burst + 1e-9; float64(total) > lim {
					t.Fatalf("%d offers by second %d, the pace allows %.1f", total, sec, lim)
				}
				if lo := allowed(tc.p.Rate, float64(sec)) - burst - 1; float64(total) < lo {
					t.Fatalf("%d offers by second %d: behind the pace's %.1f", total, sec, lo)
				}
			}
			if w := s.Waves[0]; w.Pace == nil || w.Queued != 2000-total || w.Pace.PerMinute != tc.p.Rate.Max {
				t.Errorf("wave %+v after %d offers (pace %+v)", w, total, w.Pace)
			}
		})
	}
	t.Run("a pause holds the queue", func(t *testing.T) {
		per, s := pacedRun(t, flat, 2000, 120, 30, 90)
		for sec := 31; sec < 90; sec++ {
			if per[sec] != 0 {
				t.Fatalf("%d offers in second %d, while paused", per[sec], sec)
			}
		}
		after := 0
		for _, n := range per[90:] {
			after += n
		}
		if after > 60+3+1 {
			t.Errorf("%d offers in the 30 s after the resume, the pace allows 60", after)
		}
		if s.Waves[0].Queued == 0 {
			t.Error("nothing left queued")
		}
	})
	t.Run("no rate: the wave goes out in batches at once", func(t *testing.T) {
		per, s := pacedRun(t, testPlan(100, 1, Wave{Percent: 100}), 2000, 2, 0, 0)
		if per[0] != 2000 || s.Waves[0].Offered.IsZero() {
			t.Errorf("%v offered, wave %+v", per, s.Waves[0])
		}
	})
}

func TestParseRate(t *testing.T) {
	const head = "name = \"r\"\noffer = \"o.json\"\ngroup = \"g\"\n[[wave]]\npercent = 100\n[halt]\nmax_failed_percent = 5\n"
	for _, tc := range []struct {
		toml string
		want *Rate
		err  string
	}{
		{"[rate]\noffers_per_minute = 100\n", &Rate{Start: 100, Increase: 1, Max: 100}, ""},
		{"[rate]\noffers_per_minute = 100\nincrease = 1.5\nmax_per_minute = 1000\n", &Rate{Start: 100, Increase: 1.5, Max: 1000}, ""},
		{"[rate]\nincrease = 2\n", nil, "rate.offers_per_minute: missing"},
		{"[rate]\noffers_per_minute = 0\n", nil, "rate.offers_per_minute: 0 is not in (0, 1e+06]"},
		{"[rate]\noffers_per_minute = 10\nincrease = 0.5\n", nil, "rate.increase: 0.5 is not in [1, 100]"},
		{"[rate]\noffers_per_minute = 10\nincrease = 2\n", nil, "rate.max_per_minute: missing: a pace that increases needs a ceiling"},
		{"[rate]\noffers_per_minute = 10\nmax_per_minute = 5\n", nil, "rate.max_per_minute: 5 is not in [offers_per_minute 10, 1e+06]"},
		{"[rate]\noffers_per_minute = 10\nburst = 5\n", nil, "unknown key rate.burst"},
	} {
		p, err := ParsePlan([]byte(head+tc.toml), "p.toml")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want %q", tc.toml, err, tc.err)
			}
			continue
		}
		if err != nil || *p.Rate != *tc.want {
			t.Errorf("%q: %+v %v", tc.toml, p, err)
		}
	}
	a, _ := ParsePlan([]byte(head), "p.toml")
	b, _ := ParsePlan([]byte(head+"[rate]\noffers_per_minute = 100\n"), "p.toml")
	if a.hash() == b.hash() {
		t.Error("a rate does not change the plan hash")
	}
}
