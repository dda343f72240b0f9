package demo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/otad/otad/operator"
	"github.com/otad/otad/ota"
)

// stagedPlan is the demo's rollout plan: a canary, then everybody, halted
// by the first failure.
const stagedPlan = `# otactl rollout: the canary first; any failure halts the rollout
name = %q
offer = %q
group = %q
[[wave]]
devices = [%q]
[[wave]]
percent = 100
[halt]
max_failed_percent = 0
device_timeout = "2m"
`

// staged releases the offer in envFile through `otactl rollout`: it checks
// the plan against the fleet, runs the controller while the fleet is shown,
// and expects the canary to end as r.want, the rollout to halt, and no other
// device to be offered.
func (d *run) staged(ctx context.Context, r rolloutSpec, envFile, id string) error {
	name := "demo-" + strings.ReplaceAll(r.version, ".", "_")
	plan := filepath.Join(d.dir, name+".toml")
	if err := os.WriteFile(plan, fmt.Appendf(nil, stagedPlan, name, filepath.Base(envFile), group, r.canary), 0o644); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	d.say("releasing %s through a staged rollout: %s first, then the rest of group %q; the first failure halts it (plan %s)", r.version, r.canary, group, d.rel(plan))
	out, _, err := d.otactl(ctx, []string{"rollout", "check", "--broker", d.broker.URL, "--trust", d.opPub, "--settle", "1s", plan}, "")
	if err != nil {
		return err
	}
	d.indent(out)
	args := []string{"rollout", "start", "--broker", d.broker.URL, "--operator-key", d.opKey, "--trust", d.opPub, "--settle", "2s", "--tick", "250ms", plan}
	d.say("  $ otactl %s", strings.Join(append(args[:len(args)-1:len(args)-1], d.rel(plan)), " "))
	d.say("    (watch it on the dashboard: %s)", d.dashURL)
	d.fleet.Begin(id)
	type result struct {
		code        int
		out, errOut []byte
	}
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := operator.Run(ctx, args, &out, &errOut)
		done <- result{code, out.Bytes(), errOut.Bytes()}
	}()
	var res *result
	err = d.live(ctx, "rollout "+r.version, func() (bool, error) {
		if res == nil {
			select {
			case got := <-done:
				res = &got
			default:
			}
		}
		v := d.fleet.Check([]string{r.canary}, r.want)
		if len(v.Wrong) > 0 {
			return false, fmt.Errorf("rollout %s: the canary did not end as expected:\n  %s", r.version, strings.Join(v.Wrong, "\n  "))
		}
		return res != nil && v.Done(), nil
	})
	if err != nil {
		return err
	}
	d.indent(bytes.TrimSpace(res.out))
	if res.code != ota.ExitFailure || !bytes.Contains(res.out, []byte("HALTED")) {
		return fmt.Errorf("otactl rollout start: exit %d, want a halt (1): %s", res.code, bytes.TrimSpace(res.errOut))
	}
	for _, dev := range d.ids {
		if _, offered := d.fleet.Finished(dev, id); offered && dev != r.canary {
			return fmt.Errorf("rollout %s halted, but %s got its offer too", r.version, dev)
		}
	}
	return nil
}
