package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/internal/demo"
	"github.com/otad/otad/internal/simdevice"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
)

// group is the one group every bench device is in.
const group = "bench"

type fleetOptions struct {
	imageSize int64
	timeout   time.Duration // for the devices to come up, and again for the rollout to converge
	nodelay   bool
	keep      bool
}

// fleetResult is one fleet size's run.
type fleetResult struct {
	N         int
	Setup     time.Duration // laying out the devices' files
	Up        time.Duration // from starting the agents to every status idle on slot A
	Converge  time.Duration // from the group offer's publish to the last success status
	PerDevice summary       // each device's publish-to-success time
	IdleRSS   int64         // this process's VmRSS once all agents are up, before the rollout
	Succeeded int           // devices whose live status said success in time
	Retained  int           // devices whose retained status, read afresh at the end, says success
	Peaks     peaks
	Err       error
}

// watch runs v.Watch until ctx ends; the returned channel has its error.
func watch(ctx context.Context, brokerURL string, v *fleetview.View) <-chan error {
	errc := make(chan error, 1)
	go func() {
		errc <- v.Watch(ctx, mqtt.Config{Broker: brokerURL, Logger: slog.New(slog.DiscardHandler)}, nil)
	}()
	return errc
}

// waitFor polls until want devices satisfy ok, the watcher fails or timeout passes.
func waitFor(ctx context.Context, v *fleetview.View, watchErr <-chan error, want int, timeout time.Duration, what string, ok func(ota.Status) bool) error {
	deadline := time.Now().Add(timeout)
	for {
		n := v.Count(ok)
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d after %v (%s)", what, n, want, timeout, v.Tally())
		}
		select {
		case err := <-watchErr:
			return fmt.Errorf("%s: status watcher stopped: %w", what, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// succeeded reports whether st says rollout ended in success.
func succeeded(st ota.Status, rollout string) bool {
	return st.LastResult != nil && st.LastResult.ID == rollout && st.LastResult.Result == ota.ResultSuccess
}

// runFleet lays out n devices, runs them against a fresh mosquitto and times
// one group rollout to success on all of them.
func runFleet(ctx context.Context, dir string, n int, o fleetOptions, progress func(string)) (res fleetResult) {
	res.N = n
	res.Err = runFleetInto(ctx, dir, n, o, progress, &res)
	return res
}

func runFleetInto(ctx context.Context, dir string, n int, o fleetOptions, progress func(string), res *fleetResult) error {
	// Each size starts from a clean heap, so its figures are its own.
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("fleet directory: %w", err)
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	b, err := startBroker(ctx, dir, o.nodelay)
	if err != nil {
		return err
	}
	defer b.Stop()
	www := filepath.Join(dir, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		return fmt.Errorf("image directory: %w", err)
	}
	srv, err := demo.StartFileServer(www, 0)
	if err != nil {
		return err
	}
	defer closeServer(srv)
	sg, err := newReleases(www, srv.URL)
	if err != nil {
		return err
	}
	sum, err := sg.image("fleet.img", demo.ImageSpec{Version: "fleet.1", Seed: 42, Size: o.imageSize})
	if err != nil {
		return err
	}

	setup := time.Now()
	devs := make([]*simdevice.Device, n)
	ids := make([]string, n)
	for i := range devs {
		ids[i] = fmt.Sprintf("%s%05d", devicePrefix, i)
		if devs[i], err = newDevice(filepath.Join(dir, "devices"), ids[i], b.URL, []string{group}, o.imageSize+1<<20, sg.PublicKeyPEM); err != nil {
			return err
		}
	}
	res.Setup = time.Since(setup)

	smp := &sampler{brokerPID: b.PID(), every: 250 * time.Millisecond}
	smpCtx, stopSampling := context.WithCancel(ctx)
	smpDone := make(chan struct{})
	go func() { defer close(smpDone); smp.run(smpCtx) }()
	defer func() {
		stopSampling()
		<-smpDone
		var serr error
		res.Peaks, serr = smp.peaks()
		if serr != nil {
			progress(fmt.Sprintf("fleet %d: %d of %d samples failed, last: %v", n, res.Peaks.SampleErrors, res.Peaks.Samples, serr))
		}
	}()

	tr := fleetview.New("")
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchErr := watch(watchCtx, b.URL, tr)

	devCtx, stopDevs := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopDevs()
		wg.Wait()
	}()
	up := time.Now()
	for _, d := range devs {
		wg.Add(1)
		go func() { defer wg.Done(); d.Run(devCtx) }()
	}
	if err := waitFor(ctx, tr, watchErr, n, o.timeout, "devices idle on slot A", func(s ota.Status) bool {
		return s.State == ota.Idle && s.BootedSlot == "A"
	}); err != nil {
		return fmt.Errorf("%w%s", err, agentErrors(devs))
	}
	res.Up = time.Since(up)
	if m, err := procStatus("self", "VmRSS"); err == nil {
		res.IdleRSS = m["VmRSS"]
	}
	progress(fmt.Sprintf("fleet %d: all up in %v; rolling out", n, res.Up.Round(time.Millisecond)))

	rollout := fmt.Sprintf("rel-fleet-%d", n)
	env, err := sg.offer(rollout, "fleet.1", "fleet.img", o.imageSize, sum, time.Now().Add(-time.Minute))
	if err != nil {
		return err
	}
	tr.Begin(rollout)
	if err := mqtt.PublishRetained(ctx, mqtt.Config{Broker: b.URL, Logger: slog.New(slog.DiscardHandler)}, "ota/groups/"+group+"/desired", env); err != nil {
		return err
	}
	convErr := waitFor(ctx, tr, watchErr, n, o.timeout, "devices with success", func(s ota.Status) bool { return succeeded(s, rollout) })
	var each []time.Duration
	for _, id := range ids {
		// Took counts from Begin, just before the publish.
		if f, ok := tr.Finished(id, rollout); ok && f.Result == ota.ResultSuccess {
			each = append(each, f.Took)
			res.Converge = max(res.Converge, f.Took)
		}
	}
	res.Succeeded = len(each)
	res.PerDevice = summarize(each)
	if convErr != nil {
		return fmt.Errorf("%w%s", convErr, agentErrors(devs))
	}
	if b.Exited() {
		return fmt.Errorf("mosquitto exited during the run: %s", b.Log())
	}

	// What the issue asks for is the retained status: read it afresh, as a
	// dashboard connecting now would.
	fresh := fleetview.New("")
	freshCtx, stopFresh := context.WithCancel(ctx)
	defer stopFresh()
	freshErr := watch(freshCtx, b.URL, fresh)
	ok := func(s ota.Status) bool { return succeeded(s, rollout) && s.BootedSlot == "B" }
	err = waitFor(ctx, fresh, freshErr, n, 30*time.Second, "retained statuses saying success", ok)
	res.Retained = fresh.Count(ok)
	return err
}

// agentErrors lists the first few errors agents stopped with, for a failed run.
func agentErrors(devs []*simdevice.Device) string {
	var errs []error
	count := 0
	for _, d := range devs {
		if err := d.Err(); err != nil {
			count++
			if len(errs) < 3 {
				errs = append(errs, fmt.Errorf("%s: %w", d.ID, err))
			}
		}
	}
	if count == 0 {
		return ""
	}
	return fmt.Sprintf("; %d agents stopped with errors, e.g. %v", count, errors.Join(errs...))
}
