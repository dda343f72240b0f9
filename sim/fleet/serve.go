package fleet

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// Serve is otasim fleet: it raises the descriptor limit, builds the fleet,
// says what it runs, and runs it until ctx ends.
func Serve(ctx context.Context, o Options, out io.Writer) error {
	was, now, err := RaiseNoFile()
	switch {
	case err != nil:
		fmt.Fprintf(out, "RLIMIT_NOFILE: %v; the soft limit stays %d\n", err, was)
	case now > was:
		fmt.Fprintf(out, "RLIMIT_NOFILE: soft limit raised from %d to %d (the hard limit), in this process\n", was, now)
	default:
		fmt.Fprintf(out, "RLIMIT_NOFILE: soft limit %d (already the hard limit)\n", now)
	}
	if need := uint64(o.Devices) + 256; now < need {
		fmt.Fprintf(out, "warning: %d devices need about %d descriptors (one MQTT connection each)\n", o.Devices, need)
	}
	f, err := New(o)
	if err != nil {
		return err
	}
	o = o.withDefaults()
	group := "no group"
	if o.Group != "" {
		group = "group " + o.Group
	}
	trusting := o.KeysDir
	if o.Root != "" {
		trusting = "the root of trust " + o.Root
	}
	fmt.Fprintf(out, "otasim fleet: %d devices %s to %s (%s, compatible %s) on %s, trusting %s\n",
		len(f.Devices), ID(o.Prefix, 1), ID(o.Prefix, o.Devices), group, o.Compatible, strings.TrimSpace(strings.Join(append([]string{o.Broker}, o.Brokers...), " ")), trusting)
	fmt.Fprintf(out, "installs at once: at most %d (slot memory and pipeline buffers are taken only while a device installs)\n", f.MaxInstalls)
	fmt.Fprintf(out, "health check fails on %d devices", len(f.Failing))
	if len(f.Failing) > 0 && len(f.Failing) <= 10 {
		fmt.Fprintf(out, ": %v", f.Failing)
	}
	fmt.Fprintf(out, "\nconnecting over %v (each device at a random time within it)\n", f.Spread)
	start := time.Now()
	err = f.Run(ctx)
	fmt.Fprintf(out, "otasim fleet: stopped after %v\n", time.Since(start).Round(time.Second))
	return err
}
