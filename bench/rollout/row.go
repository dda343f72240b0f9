package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/otad/otad/internal/testkit/fakefleet"
	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/controller"
)

// group is the bench devices' group.
const group = "bench"

// row is one fleet size's figures.
type row struct {
	n                             int
	stateMax                      int           // bytes
	unpaced, rebuild, paced       time.Duration // see doc.go
	first                         string        // the first wave's pace: "unpaced" (tuned), or the stock queue's ceiling
	window                        time.Duration // the report request's window the controller takes beyond its settle
	ready, published              time.Duration // the first controller's fleet view; the fleet's statuses
	ctlRSS, rebuiltRSS, brokerRSS int64         // KiB
	pacedAhead                    int           // offers ahead of the pace at worst; 0: never
	pace                          string
	broker                        string   // its limits: stock, or what was tuned
	drops                         string   // the clients the broker dropped messages for
	unseen                        []string // devices a wave's controller never saw, by wave: "paced: 37"
	err                           error
}

func runRow(ctx context.Context, dir string, n int, o options, progress func(string)) (r row) {
	r.n, r.broker = n, "stock"
	if tuned(o, n) {
		r.broker = "tuned: " + strings.Join(fakefleet.BrokerLines(), ", ")
	}
	r.err = r.measure(ctx, dir, n, o, progress)
	return r
}

func (r *row) measure(ctx context.Context, dir string, n int, o options, progress func(string)) error {
	if err := os.MkdirAll(filepath.Join(dir, "broker"), 0o755); err != nil {
		return err
	}
	if o.dir == "" {
		defer os.RemoveAll(dir)
	} else {
		defer os.RemoveAll(filepath.Join(dir, "broker")) // -dir keeps the controllers' logs
	}
	// Stock limits unless tuned; notices show its dropping of messages.
	extra := []string{"log_type notice"}
	if tuned(o, n) {
		extra = append(extra, fakefleet.BrokerLines()...)
	}
	b, err := mosquittotest.Run(ctx, filepath.Join(dir, "broker"), mosquittotest.Options{Quiet: true, LogTail: 16 << 10, Extra: extra})
	if err != nil {
		return err
	}
	defer b.Stop()
	defer func() { r.drops = dropsIn(b.Log()) }()
	fl, fleetErr, err := r.fleet(b.URL, n, progress)
	if err != nil {
		return err
	}
	defer fl.Close()
	op, err := newOperatorKey(dir)
	if err != nil {
		return err
	}
	w, err := watchStates(b.URL, op.trust)
	if err != nil {
		return err
	}
	defer w.close()
	sg, err := signer.New()
	if err != nil {
		return err
	}
	settle := o.settle
	if settle == 0 {
		settle = 3*time.Second + time.Duration(n/40000)*time.Second
	}
	c := controllerRun{bin: o.otactl, broker: b.URL, settle: settle, lease: o.lease, dir: dir, op: op, queue: rollout.DefaultBrokerQueue}
	// The controller's report window: 500 answers a second at most at a
	// stock queue of 1,000, 10,000 with none (rollout/controller,
	// reportWindow).
	perSecond := c.queue / 2
	if tuned(o, n) {
		c.queue = 0 // max_queued_messages 0: no limit, as the controller is told
		perSecond = controller.UnqueuedAnswersPerSecond
	}
	r.window = controller.AnswerWindow(0, n, perSecond)

	if err := r.unpacedAndRestart(ctx, dir, c, w, fl, sg, n, o, progress); err != nil {
		return err
	}
	if err := r.pacedWave(ctx, dir, c, w, fl, sg, n, progress); err != nil {
		return err
	}
	r.stateMax = max(w.largestOf("bench-unpaced"), w.largestOf("bench-paced"))
	if m, err := procStatus(b.PID(), "VmHWM"); err == nil {
		r.brokerRSS = m["VmHWM"]
	}
	return fleetErr()
}

// fleet starts n fake devices on broker: their retained statuses
// published, their answers to report requests and offers ready; fleetErr
// is what made it fail since.
func (r *row) fleet(broker string, n int, progress func(string)) (fl *fakefleet.Fleet, fleetErr func() error, err error) {
	var failed atomic.Pointer[error]
	fleetErr = func() error {
		if e := failed.Load(); e != nil {
			return *e
		}
		return nil
	}
	if fl, err = fakefleet.Dial(broker, "", 4, func(err error) { failed.CompareAndSwap(nil, &err) }); err != nil {
		return nil, nil, err
	}
	fl.Groups = []string{group}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%032x", i) // as long as /etc/machine-id names
	}
	// Offers on connections of 1,000 devices each: a real device reads its
	// own, and one connection for all would be the broker's queue's limit,
	// not the controller's.
	if err := fl.TakeOffersOf(ids, func(string) ota.Result { return ota.ResultSuccess }); err != nil {
		fl.Close()
		return nil, nil, err
	}
	start := time.Now()
	fl.Publish(ids)
	r.published = time.Since(start)
	fl.Answer(ids)
	progress(fmt.Sprintf("%d devices: statuses published in %v", n, r.published.Round(time.Millisecond)))
	if err := fleetErr(); err != nil {
		fl.Close()
		return nil, nil, err
	}
	return fl, fleetErr, nil
}

// unpacedAndRestart: every device offered at once, then the controller
// killed with -9 while soaking and started again at once, which takes over
// and rebuilds its view.
func (r *row) unpacedAndRestart(ctx context.Context, dir string, c controllerRun, w *watcher, fl *fakefleet.Fleet, sg *signer.Signer, n int, o options, progress func(string)) error {
	// The first wave, then a kill -9 while soaking and a restart. Unpaced
	// on a broker without a queue limit; on the stock one at the fastest
	// pace its queue takes (rollout.PacePreflight), as a controller refuses
	// an unpaced wave larger than the queue.
	waves := "[[wave]]\npercent = 100\nsoak = \"1h\"\n[[wave]]\ndevices = [\"bench-nobody\"]\n"
	r.first = "unpaced"
	if c.queue > 0 {
		waves += fmt.Sprintf("[rate]\noffers_per_minute = %d\n", 60*c.queue)
		r.first = fmt.Sprintf("%d/min (queue %d)", 60*c.queue, c.queue)
	}
	plan, err := writePlan(dir, sg, "bench-unpaced", waves)
	if err != nil {
		return err
	}
	first, err := c.start(ctx, plan, "first")
	if err != nil {
		return err
	}
	s, err := w.wait(ctx, first, "bench-unpaced", 30*time.Minute, func(s rollout.State) bool { return s.Wave == 1 })
	if err != nil {
		return first.fail(err)
	}
	waveStart := s.Waves[0].Started
	r.ready = waveStart.Sub(first.started)
	k, err := r.offeredBy(ctx, w, first, "bench-unpaced", n)
	if err != nil {
		return first.fail(err)
	}
	if err := waitCount(ctx, first, func() int64 { return fl.Offered.Load() }, int64(k), 30*time.Minute); err != nil {
		return first.fail(fmt.Errorf("unpaced offers: %w", err))
	}
	at := fl.Arrivals()
	r.unpaced = at[len(at)-1].Sub(waveStart)
	progress(fmt.Sprintf("%d devices: every offer out %v after the wave started", n, r.unpaced.Round(time.Millisecond)))
	s, err = w.wait(ctx, first, "bench-unpaced", 30*time.Minute, func(s rollout.State) bool { return s.Phase == rollout.PhaseSoaking })
	if err != nil {
		return first.fail(err)
	}
	if r.ctlRSS, err = first.kill(); err != nil {
		return err
	}
	holder := s.Lease.Holder
	// Started again at once: it proves its predecessor gone (same host and
	// boot, its pid not running) and takes over without waiting out the lease.
	progress(fmt.Sprintf("%d devices: controller killed (-9) while soaking, %s peak; started again at once", n, mib(r.ctlRSS)))
	again, err := c.start(ctx, plan, "restart")
	if err != nil {
		return err
	}
	if err := again.waitLog(ctx, fmt.Sprintf(`msg="rollout: fleet view ready" devices=%d`, n), 30*time.Minute); err != nil {
		return again.fail(err)
	}
	r.rebuild = time.Since(again.started)
	if _, err := w.wait(ctx, again, "bench-unpaced", 2*o.lease, func(s rollout.State) bool {
		return s.Lease != nil && s.Lease.Holder != holder && s.Counts.Success == n && s.Phase == rollout.PhaseSoaking
	}); err != nil {
		return again.fail(fmt.Errorf("the restarted controller's counts: %w", err))
	}
	if r.rebuiltRSS, err = again.stop(); err != nil {
		return err
	}
	progress(fmt.Sprintf("%d devices: rebuilt in %v, %s peak", n, r.rebuild.Round(time.Millisecond), mib(r.rebuiltRSS)))

	return nil
}

// pacedWave: a new offer to every device at a pace that doubles each
// minute, and how far ahead of the pace the offers ever were.
func (r *row) pacedWave(ctx context.Context, dir string, c controllerRun, w *watcher, fl *fakefleet.Fleet, sg *signer.Signer, n int, progress func(string)) error {
	// The paced wave: a new offer, so every device takes it.
	rate := rollout.Rate{Start: float64(n) / 4, Increase: 2, Max: float64(n)}
	if c.queue > 0 { // the fastest pace the broker's queue takes
		rate.Max = min(rate.Max, float64(60*c.queue))
		rate.Start = min(rate.Start, rate.Max)
	}
	r.pace = fmt.Sprintf("%.0f offers a minute, doubling every minute up to %.0f", rate.Start, rate.Max)
	paced, err := writePlan(dir, sg, "bench-paced", fmt.Sprintf("[[wave]]\npercent = 100\n[rate]\noffers_per_minute = %g\nincrease = %g\nmax_per_minute = %g\n",
		rate.Start, rate.Increase, rate.Max))
	if err != nil {
		return err
	}
	before := len(fl.Arrivals())
	third, err := c.start(ctx, paced, "paced")
	if err != nil {
		return err
	}
	s, err := w.wait(ctx, third, "bench-paced", 30*time.Minute, func(s rollout.State) bool { return s.Wave == 1 })
	if err != nil {
		return third.fail(err)
	}
	pacedStart := s.Waves[0].Started
	k, err := r.offeredBy(ctx, w, third, "bench-paced", n)
	if err != nil {
		return third.fail(err)
	}
	if err := waitCount(ctx, third, func() int64 { return fl.Offered.Load() }, int64(before+k), 30*time.Minute); err != nil {
		return third.fail(fmt.Errorf("paced offers: %w", err))
	}
	at := fl.Arrivals()[before:]
	r.paced = at[len(at)-1].Sub(pacedStart)
	r.pacedAhead = ahead(rate, pacedStart, at)
	if os.Getenv("ROLLOUTBENCH_DEBUG") != "" {
		for _, k := range []int{0, len(at) / 4, len(at) / 2, len(at) - 1} {
			progress(fmt.Sprintf("paced arrival %d at %v (allowed %.0f)", k, at[k].Sub(pacedStart), rollout.Allowed(rate, at[k].Sub(pacedStart))))
		}
	}
	_, err = third.wait(30 * time.Minute)
	return err
}

// offeredBy waits until rollout name's first wave has every offer out,
// as its state says, and returns to how many devices: the devices its
// controller saw, which the row counts against n.
func (r *row) offeredBy(ctx context.Context, w *watcher, p *proc, name string, n int) (int, error) {
	s, err := w.wait(ctx, p, name, 30*time.Minute, func(s rollout.State) bool { return len(s.Waves) > 0 && !s.Waves[0].Offered.IsZero() })
	if err != nil {
		return 0, err
	}
	k := s.Waves[0].Counts.Devices
	if k < n {
		r.unseen = append(r.unseen, fmt.Sprintf("%s: %d", strings.TrimPrefix(name, "bench-"), n-k))
	}
	return k, nil
}

// writePlan writes rollout name's plan (waves, a halt rule) and a signed
// offer of its own (a new manifest ID: every device takes it).
func writePlan(dir string, sg *signer.Signer, name, waves string) (string, error) {
	sum := sha256.Sum256([]byte(name))
	env, err := sg.Sign(signer.Offer{ID: "rel-" + name, Version: "2.0", SecurityVersion: 1, Compatible: "bench",
		URL: "https://updates.example.com/" + name + ".img", Size: 1 << 20, SHA256: hex.EncodeToString(sum[:]), Issued: time.Now().Add(-time.Minute)})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".offer.json"), env, 0o644); err != nil {
		return "", err
	}
	plan := filepath.Join(dir, name+".toml")
	body := fmt.Sprintf("name = %q\noffer = %q\ngroup = %q\n%s\n[halt]\nmax_failed_percent = 5\nmin_outcomes = 100\ndevice_timeout = \"2h\"\n",
		name, name+".offer.json", group, waves)
	return plan, os.WriteFile(plan, []byte(body), 0o644)
}

// ahead is how far, at worst, the offers that arrived at (in order) ran
// ahead of rate's pace from start: the pace's integral plus the bucket's
// second (rollout.Pace).
func ahead(rate rollout.Rate, start time.Time, at []time.Time) int {
	worst := 0
	for k, t := range at {
		allowed := rollout.Allowed(rate, t.Sub(start)) + rate.Max/60 + 1
		if over := k + 1 - int(allowed); over > worst {
			worst = over
		}
	}
	return worst
}

func waitCount(ctx context.Context, p *proc, count func() int64, want int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n := count()
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d after %v", n, want, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return fmt.Errorf("%d of %d when the controller exited", count(), want)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tuned(o options, n int) bool { return o.tuned > 0 && n >= o.tuned }

// dropsIn names the clients mosquitto's log says it dropped messages for
// ("Outgoing messages are being dropped for client ID."), by kind and how
// many times: "none", or "controller 2x, fleet 1x".
func dropsIn(log string) string {
	count := map[string]int{}
	var kinds []string
	for _, l := range strings.Split(log, "\n") {
		_, id, ok := strings.Cut(l, "Outgoing messages are being dropped for client ")
		if !ok {
			continue
		}
		kind := "other"
		switch {
		case strings.HasPrefix(id, "otactl-rollout-"):
			kind = "controller"
		case strings.HasPrefix(id, "fakefleet-"):
			kind = "fleet"
		}
		if count[kind] == 0 {
			kinds = append(kinds, kind)
		}
		count[kind]++
	}
	if len(kinds) == 0 {
		return "none"
	}
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = fmt.Sprintf("%s %dx", k, count[k])
	}
	return strings.Join(out, ", ")
}
