package operator

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// A 36-byte retained state with a million (or 1e8) waves: otactl rollout
// status refuses it, naming the field and its limit, and allocates far
// under 64 MiB doing so (it took 23.7 GB); a lease of ten years is refused
// as out of bounds.
func TestRolloutStatusBoundedState(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	c := mosquittotest.Client(t, b.URL, "writer")
	for _, tc := range []struct{ name, state, want string }{
		{"bomb6", `{"name":"bomb6","wave_count":1000000}`, "wave_count 1000000 out of bounds: a plan has 1 to 32 waves"},
		{"bomb8", `{"name":"bomb8","wave_count":100000000}`, "wave_count 100000000 out of bounds"},
		{"decade", `{"name":"decade","wave_count":1,"lease":{"holder":"x","epoch":9,"ttl_ms":315360000000}}`, "lease.ttl_ms 315360000000 out of bounds: 1 to 600000"},
	} {
		topic := "ota/rollouts/" + tc.name + "/state"
		signed, err := rollout.Seal(testOperator.key, topic, 1, []byte(tc.state))
		if err != nil {
			t.Fatal(err)
		}
		c.Publish(topic, 1, true, signed).Wait()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := otactl(t, "rollout", "status", "--broker", b.URL, tc.name)
		runtime.ReadMemStats(&after)
		if r.code == ota.ExitOK || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q, want %q", tc.name, r.code, r.stderr, tc.want)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
			t.Errorf("%s: %s allocated, want under 64 MiB", tc.name, fmt.Sprint(alloc>>20, " MiB"))
		}
		// Unsigned, it is not even decoded: a forged state, reported.
		c.Publish(topic, 1, true, tc.state).Wait()
		r = otactl(t, "rollout", "status", "--broker", b.URL, tc.name)
		if want := "forged state on " + topic + " ignored: not signed by a trusted operator key"; r.code == ota.ExitOK || !strings.Contains(r.stderr, want) {
			t.Errorf("%s unsigned: exit %d, stderr %q, want %q", tc.name, r.code, r.stderr, want)
		}
	}
}
