package operator

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/fakefleet"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

// scaleFleet is n fake devices in group "g" on a stock Mosquitto: retained
// statuses, answers to report requests, and each offer answered with
// result(id), taken on connections of 1,000 devices each.
func scaleFleet(t *testing.T, n int, result func(id string) ota.Result) (*mosquittotest.Broker, *fakefleet.Fleet, []string) {
	t.Helper()
	// Mosquitto's stock limits (docs/brokers.md, a large fleet).
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	f, ids := fleetOn(t, b, n, result)
	return b, f, ids
}

// fleetOn is scaleFleet's fleet on broker b.
func fleetOn(t *testing.T, b *mosquittotest.Broker, n int, result func(id string) ota.Result) (*fakefleet.Fleet, []string) {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%032x", i) // names as long as /etc/machine-id's
	}
	f := fakefleet.Connect(t, b.URL, "")
	f.Groups = []string{"g"}
	// Offers on connections of 1,000 devices each, as each real device
	// reads its own: one connection for all is sent more of a wave than a
	// stock Mosquitto queues for a client whenever the fleet reads slower
	// than the pace (a loaded machine, -race).
	if err := f.TakeOffersOf(ids, result); err != nil {
		t.Fatal(err)
	}
	f.Publish(ids)
	f.Answer(ids)
	return f, ids
}

// scalePlan writes a plan of name releasing a signed offer to group "g".
func scalePlan(t *testing.T, name, waves, halt string) string {
	t.Helper()
	env, dir := signedEnvelope(t, "4.2.0", "acme,gw-v2", "https://updates.example.com/rootfs.img")
	body := fmt.Sprintf("name = %q\noffer = %q\ngroup = \"g\"\n%s\n[halt]\n%s\n", name, env, waves, halt)
	return testtool.WriteFile(t, filepath.Join(dir, name+".toml"), []byte(body))
}

// A paced wave never exceeds its pace, counted where the offers arrive.
func TestPacedWaveAtTheBroker(t *testing.T) {
	b, f, ids := scaleFleet(t, 150, func(string) ota.Result { return ota.ResultSuccess })
	plan := scalePlan(t, "paced", "[[wave]]\npercent = 100\n[rate]\noffers_per_minute = 600\n", "max_failed_percent = 5\n")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	code := Run(ctx, []string{"rollout", "start", "--broker", b.URL, "--settle", "1s", "--tick", "100ms", plan}, &out, &errOut)
	if code != ota.ExitOK {
		t.Fatalf("exit %d\n%s", code, tail(errOut.String()))
	}
	at := f.Arrivals()
	if len(at) != len(ids) {
		t.Fatalf("%d offers arrived, want %d", len(at), len(ids))
	}
	// 600 a minute is 10 a second; the bucket holds a second's worth and one.
	for i := range at {
		for j := i; j < len(at); j++ {
			span := at[j].Sub(at[i]).Seconds()
			if allowed := 10*span + 11 + 1; float64(j-i+1) > allowed {
				t.Fatalf("%d offers within %.2f s, the pace allows %.0f", j-i+1, span, allowed)
			}
		}
	}
	took := at[len(at)-1].Sub(at[0])
	t.Logf("%d offers over %v", len(at), took.Round(time.Millisecond))
	if took < 12*time.Second {
		t.Errorf("150 offers at 10 a second went out in %v", took)
	}
}

// settled waits until count reaches at least want and then stays put for
// a second: what was sent has all arrived.
func settled(t *testing.T, count func() int64, want int64) {
	t.Helper()
	last, since := count(), time.Now()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		n := count()
		if n != last {
			last, since = n, time.Now()
		}
		if n >= want && time.Since(since) > time.Second {
			return
		}
	}
	t.Fatalf("%d arrived, want %d", last, want)
}

func tail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}
