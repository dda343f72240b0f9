package rollout

import (
	"errors"
	"os"
	"testing"
)

func FuzzParsePlan(f *testing.F) {
	if b, err := os.ReadFile(specPlan); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		``, `name = "r"`, "name=\"r\"\noffer=\"o\"\ngroup=\"g\"\n[[wave]]\npercent=1e308\n[halt]\nmax_failed_percent=-0.0\n",
		"name=\"r\"\noffer=\"o\"\ngroup=\"g\"\n[[wave]]\ndevices=[\"a\",\"a\"]\n[halt]\nmax_failed_percent=1\n",
		"[[wave]]\npercent=inf\n", "[halt]\nmin_outcomes=9223372036854775807\n", "wave = 3", "[wave]\npercent=1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePlan(data, "fuzz.toml")
		if err != nil {
			var pe *PlanError
			if !errors.As(err, &pe) || pe.Path != "fuzz.toml" {
				t.Fatalf("error is not a PlanError naming the file: %#v", err)
			}
			return
		}
		// What is accepted keeps every rule.
		if checkName(p.Name) != nil || checkName(p.Group) != nil || p.OfferFile == "" || len(p.Waves) == 0 || len(p.Waves) > maxWaves {
			t.Fatalf("accepted plan breaks a rule: %+v", p)
		}
		last := 0.0
		seen := map[string]bool{}
		for _, w := range p.Waves {
			if (w.Devices == nil) == (w.Percent == 0) || w.Soak < 0 {
				t.Fatalf("wave %+v", w)
			}
			if w.Devices == nil && (w.Percent <= 0 || w.Percent > 100 || w.Percent < last) {
				t.Fatalf("percent %v after %v", w.Percent, last)
			}
			last = max(last, w.Percent)
			for _, d := range w.Devices {
				if checkDeviceID(d) != nil || seen[d] {
					t.Fatalf("device %q", d)
				}
				seen[d] = true
			}
		}
		h := p.Halt
		if !(h.MaxFailedPercent >= 0 && h.MaxFailedPercent <= 100) || h.MinOutcomes < 1 || h.DeviceTimeout <= 0 {
			t.Fatalf("halt %+v", h)
		}
		// The canonical form is a function of the plan.
		again, err := ParsePlan(data, "fuzz.toml")
		if err != nil || again.hash() != p.hash() {
			t.Fatalf("parsing twice: %v", err)
		}
	})
}

// Records and statuses come from the broker: whatever arrives, a record is
// returned only for its own device with known outcomes, and a tracker
// takes any status without failing, keeping only the device it is about.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"device":"d1","wave":2,"kept":"success","accepted":"timed_out","time":"2026-11-29T10:00:00Z"}`), "d1")
	f.Add([]byte(`{"device":"d1","accepted":"success"}`), "d1")
	f.Add([]byte(`{"device":"d2"}`), "d1")
	f.Fuzz(func(t *testing.T, b []byte, id string) {
		r, err := DecodeRecord(b, id)
		if err == nil && (r.Device != id || (r.Kept != "" && !knownOutcome(r.Kept)) || (r.Accepted != "" && !bad(r.Accepted))) {
			t.Fatalf("accepted %q for %q as %+v", b, id, r)
		}
	})
}
