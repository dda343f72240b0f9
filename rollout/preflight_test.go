package rollout

import (
	"errors"
	"strings"
	"testing"
)

// The preflight's arithmetic: a wave without a pace needs a queue as large
// as the wave, a pace a second's worth of offers at its ceiling; 0 is no
// limit, and the error names the setting and the number needed.
func TestPreflight(t *testing.T) {
	for _, tc := range []struct {
		name          string
		waves, rate   string
		inGroup       int
		queue         int
		need          int    // 0: fits
		what, fix     string // in the error
		beforeAnyRead bool   // refused from the plan alone (the pace)
	}{
		{name: "20,000 paced at 1,000 a second fits a stock queue", waves: "[[wave]]\npercent = 100\n", rate: "offers_per_minute = 60000\n", inGroup: 20000, queue: 1000},
		{name: "a pace over the queue", waves: "[[wave]]\npercent = 100\n", rate: "offers_per_minute = 25000\nincrease = 2\nmax_per_minute = 100000\n", inGroup: 100000, queue: 1000,
			need: 1667, what: "the pace of 100000 offers a minute", fix: "lower [rate] max_per_minute to 60000 at most", beforeAnyRead: true},
		{name: "the pace against a stated queue", waves: "[[wave]]\npercent = 100\n", rate: "offers_per_minute = 100000\n", inGroup: 100000, queue: 2000},
		{name: "100,000 unpaced at once", waves: "[[wave]]\npercent = 100\n", inGroup: 100000, queue: 1000,
			need: 100000, what: "wave 1 (100000 devices, no [rate])", fix: "--broker-queue 100000"},
		{name: "the largest wave names the number", waves: "[[wave]]\npercent = 1\n[[wave]]\npercent = 10\n[[wave]]\npercent = 100\n", inGroup: 20000, queue: 1000,
			need: 18000, what: "wave 3 (18000 devices, no [rate])", fix: "[rate] max_per_minute 60000 at most"},
		{name: "small waves fit unpaced", waves: "[[wave]]\ndevices = [\"a\", \"b\"]\n[[wave]]\npercent = 5\n", inGroup: 20000, queue: 1000},
		{name: "a wave of exactly the queue fits", waves: "[[wave]]\npercent = 100\n", inGroup: 1000, queue: 1000},
		{name: "one more does not", waves: "[[wave]]\npercent = 100\n", inGroup: 1001, queue: 1000, need: 1001, what: "wave 1 (1001 devices"},
		{name: "no limit (RabbitMQ, or the setting at 0)", waves: "[[wave]]\npercent = 100\n", inGroup: 1000000, queue: 0},
		{name: "no limit for a pace either", waves: "[[wave]]\npercent = 100\n", rate: "offers_per_minute = 1000000\n", inGroup: 1000000, queue: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toml := "name = \"r\"\noffer = \"o\"\ngroup = \"g\"\n" + tc.waves + "[halt]\nmax_failed_percent = 5\n"
			if tc.rate != "" {
				toml += "[rate]\n" + tc.rate
			}
			p, err := ParsePlan([]byte(toml), "x.toml")
			if err != nil {
				t.Fatal(err)
			}
			pace := PacePreflight(p, tc.queue)
			err = errors.Join(pace, WavePreflight(p, tc.inGroup, tc.queue))
			if tc.need == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var bq *BrokerQueueError
			if !errors.As(err, &bq) || bq.Need != tc.need || bq.Queue != tc.queue {
				t.Fatalf("got %v, want a queue of %d needed", err, tc.need)
			}
			if (pace != nil) != tc.beforeAnyRead {
				t.Errorf("refused from the plan alone: %v, want %v", pace != nil, tc.beforeAnyRead)
			}
			for _, s := range []string{tc.what, tc.fix, "max_queued_messages", "rollout r:"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err, s)
				}
			}
		})
	}
}

// EmptyGroup says what waits for the group and what is offered all the
// same, from the waves still to start; nothing when nothing waits.
func TestEmptyGroup(t *testing.T) {
	p := testPlan(5, 1, named(0, "gw-1", "gw-2"), Wave{Percent: 10}, Wave{Percent: 100})
	want := `group g: no device's status lists it (yet): wave 1 offers its 2 named devices all the same (one never heard of times out after device_timeout 1h0m0s and counts as failed); ` +
		`wave 2 (10%) and the percent waves after it wait, offering nothing, until a device whose status lists the group is seen; this controller keeps running (state waiting) and starts them then`
	if got := EmptyGroup(p, State{}); got != want {
		t.Errorf("new rollout:\n%s\nwant\n%s", got, want)
	}
	if got := EmptyGroup(p, State{Wave: 1}); !strings.HasPrefix(got, "group g: no device's status lists it (yet): wave 2 (10%) and the percent waves after it wait") {
		t.Errorf("after the canaries: %s", got)
	}
	for name, s := range map[string]State{"all started": {Wave: 3}, "halted": {Halted: &Mark{}}, "finished": {Finished: &Mark{}}} {
		if got := EmptyGroup(p, s); got != "" {
			t.Errorf("%s: %s", name, got)
		}
	}
	if got := EmptyGroup(testPlan(5, 1, named(0, "gw-1")), State{}); got != "" {
		t.Errorf("named devices only: %s", got)
	}
}
