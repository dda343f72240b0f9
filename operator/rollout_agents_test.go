package operator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/sim/device"
)

// agentFleet runs n real agents (sim/device: slot files, the sim
// bootloader, the daemon over MQTT) in group "fleet"; bad devices' health
// check fails. It returns the devices and the signed offer's path.
func agentFleet(t *testing.T, broker string, n int, bad map[string]bool) ([]*device.Device, string) {
	t.Helper()
	env, dir := signedEnvelope(t, "2.0.0", "rollout-test", "")
	pub, err := os.ReadFile(filepath.Join(dir, "release.pub"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var devs []*device.Device
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("gw-%02d", i)
		health := "/bin/true"
		if bad[id] {
			health = "/bin/false"
		}
		d, err := device.New(device.Spec{
			ID: id, Dir: filepath.Join(dir, id), Compatible: "rollout-test", SlotSize: 1 << 20, TrustedKey: pub,
			Broker: broker, Groups: []string{"fleet"}, Download: config.Download{Schemes: []string{"file"}},
			HealthCommand: func(device.Paths) []string { return []string{health} }, CommitWindow: 2 * time.Second,
		}, "test")
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, d)
		wg.Go(func() { d.Run(ctx) })
	}
	return devs, env
}

// fleetStatuses follows every device's status as the operator would.
func fleetStatuses(t *testing.T, broker string) *fleetview.View {
	t.Helper()
	fv := fleetview.New("ota")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { fv.Watch(ctx, mqtt.Config{Broker: broker}, nil); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return fv
}

func waitFleet(t *testing.T, fv *fleetview.View, what string, ids []string, ok func(ota.Status) bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var waiting []string
		for _, id := range ids {
			if st, found := fv.Status(id); !found || !ok(st) {
				waiting = append(waiting, id)
			}
		}
		if len(waiting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still waiting for %v", what, waiting)
		}
	}
}

const agentsPlan = `name = "agents"
offer = %q
group = "fleet"
[[wave]]
devices = ["gw-01", "gw-02"]
soak = "1s"
[[wave]]
percent = 30
soak = "1s"
[[wave]]
percent = 100
[halt]
max_failed_percent = 10
min_outcomes = 4
device_timeout = "2m"
`

// Real agents on a real Mosquitto. With failing health checks among the
// 30% wave, the rollout halts there: its bad devices roll back, the devices
// of the last wave are never offered. With none failing, every device ends on
// the new image after exactly one install (one reboot).
func TestRolloutWithRealAgents(t *testing.T) {
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("gw-%02d", i+1)
	}
	// The waves, as the controller will choose them (a stable hash).
	p := &rollout.Plan{Name: "agents", Waves: []rollout.Wave{{Devices: []string{"gw-01", "gw-02"}}, {Percent: 30}, {Percent: 100}}}
	ws := rollout.Assign(p, ids)
	wave2, wave3 := ws[1], ws[2]
	if len(wave2) != 4 || len(wave3) != 14 {
		t.Fatalf("waves of %d and %d devices", len(wave2), len(wave3))
	}
	for _, tc := range []struct {
		name string
		bad  []string
	}{
		{"two of the 30 percent wave fail their health check", []string{wave2[0], wave2[1], wave3[0]}},
		{"none fails", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mosquittotest.Start(t, mosquittotest.Options{})
			bad := map[string]bool{}
			for _, d := range tc.bad {
				bad[d] = true
			}
			devs, env := agentFleet(t, b.URL, len(ids), bad)
			fv := fleetStatuses(t, b.URL)
			waitFleet(t, fv, "every device up and idle", ids, func(s ota.Status) bool { return s.State == ota.Idle })
			plan := filepath.Join(t.TempDir(), "plan.toml")
			if err := os.WriteFile(plan, []byte(fmt.Sprintf(agentsPlan, env)), 0o644); err != nil {
				t.Fatal(err)
			}
			r := otactl(t, "rollout", "start", "--broker", b.URL, "--settle", "1s", "--tick", "200ms", plan)
			s := retainedState(t, b.URL, "agents")
			onB := func(s ota.Status) bool {
				return s.BootedSlot == ota.SlotB && s.LastResult != nil && s.LastResult.Result == ota.ResultSuccess
			}
			if len(tc.bad) == 0 {
				if r.code != ota.ExitOK || s.Phase != rollout.PhaseFinished || s.Counts.Success != 20 {
					t.Fatalf("exit %d, %s %+v\n%s", r.code, s.Phase, s.Counts, r.stderr)
				}
				waitFleet(t, fv, "every device on the new image", ids, onB)
				for _, d := range devs {
					if d.Boots() != 2 {
						t.Errorf("%s booted %d times, want 2 (one install, one reboot)", d.ID, d.Boots())
					}
				}
				return
			}
			if r.code != ota.ExitFailure || s.Phase != rollout.PhaseHalted || s.Wave != 2 {
				t.Fatalf("exit %d, %s in wave %d, want halted in wave 2\n%s\n%s", r.code, s.Phase, s.Wave, r.stdout, r.stderr)
			}
			good := slices.DeleteFunc(append([]string{"gw-01", "gw-02"}, wave2...), func(d string) bool { return bad[d] })
			waitFleet(t, fv, "the good devices of waves 1 and 2 on the new image", good, onB)
			waitFleet(t, fv, "the bad ones back on slot A", tc.bad[:2], func(s ota.Status) bool {
				return s.BootedSlot == ota.SlotA && s.State == ota.Idle && s.LastResult != nil && s.LastResult.Code == ota.CodeHealthCheckFailed
			})
			for _, d := range wave3 {
				st, _ := fv.Status(d)
				if st.LastResult != nil || st.BootedSlot != ota.SlotA {
					t.Errorf("%s of the last wave got something: booted %s, last result %+v", d, st.BootedSlot, st.LastResult)
				}
				if got, ok := retainedOn(t, b.URL, "ota/devices/"+d+"/desired"); ok {
					t.Errorf("%s of the last wave has a retained offer (%d bytes)", d, len(got))
				}
			}
			if !strings.Contains(r.stdout, "halted in wave 2") {
				t.Errorf("output:\n%s", r.stdout)
			}
		})
	}
}
