package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/sim/demo"
	"github.com/otad/otad/sim/device"
	"github.com/otad/otad/sim/fleet"
)

// group is the one group every bench device is in.
const group = "bench"

type fleetOptions struct {
	imageSize   int64
	timeout     time.Duration // for the devices to come up, and again for the rollout to converge
	nodelay     bool
	maxInstalls int
}

// fleetResult is one fleet size's run.
type fleetResult struct {
	N         int
	Up        time.Duration // from starting the fleet to every device idle on slot A
	Converge  time.Duration // from the group offer's publish to the last device's success
	PerDevice summary       // each device's publish-to-success time
	IdleRSS   int64         // this process's VmRSS once all agents are up, before the offer
	IdleGor   int           // goroutines then
	Succeeded int
	Downloads [2]int // fewest and most image downloads by one device
	Peaks     peaks
	Err       error
}

// tracker is the fleet's own view of its devices (sim/fleet Observe): no
// broker in the way, so it holds at any size.
type tracker struct {
	offer rollout.Ref // the group offer followed; zero before it
	start time.Time

	mu      sync.Mutex
	idle    map[string]bool
	success map[string]time.Duration
}

func (t *tracker) observe(st ota.Status) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case st.State == ota.Idle && st.BootedSlot == ota.SlotA && st.LastResult == nil:
		t.idle[st.Device] = true
	case t.offer.ID != "" && st.BootedSlot == ota.SlotB:
		// Settled success: committed, idle on slot B.
		if o := rollout.OutcomeOf(st, t.offer); o.Settled && o.Result == ota.ResultSuccess {
			if _, ok := t.success[st.Device]; !ok {
				t.success[st.Device] = time.Since(t.start)
			}
		}
	}
}

func (t *tracker) begin(offer rollout.Ref) {
	t.mu.Lock()
	t.offer, t.start = offer, time.Now()
	t.mu.Unlock()
}

func (t *tracker) counts() (idle, success int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.idle), len(t.success)
}

// waitFor polls until want devices are counted by which, or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, want int, what string, count func() int) error {
	deadline := time.Now().Add(timeout)
	for {
		n := count()
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d after %v", what, n, want, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// imageServer serves the image and counts each device's downloads.
type imageServer struct {
	url  string
	srv  *http.Server
	mu   sync.Mutex
	gets map[string]int
}

func serveImage(img []byte) (*imageServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("image server: %w", err)
	}
	s := &imageServer{url: "http://" + ln.Addr().String(), gets: map[string]int{}}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.gets[r.Header.Get(device.DeviceHeader)]++
		s.mu.Unlock()
		http.ServeContent(w, r, "fleet.img", time.Time{}, bytes.NewReader(img))
	})}
	go s.srv.Serve(ln)
	return s, nil
}

// downloads is the fewest and most downloads by one of n devices.
func (s *imageServer) downloads(n int) [2]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	lo, hi := 0, 0
	if len(s.gets) == n {
		lo = n
	}
	for _, c := range s.gets {
		lo, hi = min(lo, c), max(hi, c)
	}
	return [2]int{lo, hi}
}

// runFleet runs n in-memory devices (otasim fleet) against a fresh, stock
// mosquitto and times one group offer to success on all of them.
func runFleet(ctx context.Context, dir string, n int, o fleetOptions, progress func(string)) (res fleetResult) {
	res.N = n
	res.Err = runFleetInto(ctx, dir, n, o, progress, &res)
	return res
}

func runFleetInto(ctx context.Context, dir string, n int, o fleetOptions, progress func(string), res *fleetResult) error {
	// Each size starts from a clean heap and a reset peak, so its figures are its own.
	runtime.GC()
	debug.FreeOSMemory()
	resetPeakRSS()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("fleet directory: %w", err)
	}
	defer os.RemoveAll(dir)
	rig, err := startRig(ctx, dir, o)
	if err != nil {
		return err
	}
	defer rig.close()
	tr := &tracker{idle: map[string]bool{}, success: map[string]time.Duration{}}
	f, err := fleet.New(fleet.Options{Broker: rig.broker.URL, Devices: n, KeysDir: rig.keys, Prefix: devicePrefix, Group: group,
		Compatible: compatible, MaxInstalls: o.maxInstalls, Observe: tr.observe})
	if err != nil {
		return err
	}
	defer sampleBroker(ctx, rig.broker.PID(), func(p peaks, err error) {
		res.Peaks = p
		if err != nil {
			progress(fmt.Sprintf("fleet %d: %d of %d samples failed, last: %v", n, p.SampleErrors, p.Samples, err))
		}
	})()

	devCtx, stopDevs := context.WithCancel(ctx)
	fleetDone := make(chan error, 1)
	go func() { fleetDone <- f.Run(devCtx) }()
	defer func() { stopDevs(); <-fleetDone }()
	up := time.Now()
	if err := waitFor(ctx, o.timeout, n, "devices idle on slot A", func() int { i, _ := tr.counts(); return i }); err != nil {
		return errors.Join(err, f.Errs())
	}
	res.Up = time.Since(up)
	time.Sleep(2 * time.Second) // the last devices' first status and subscriptions settle
	runtime.GC()
	if m, err := procStatus("self", "VmRSS"); err == nil {
		res.IdleRSS = m["VmRSS"]
	}
	res.IdleGor = runtime.NumGoroutine()
	progress(fmt.Sprintf("fleet %d: all up in %v (spread %v), %s idle; offering", n, res.Up.Round(time.Millisecond), f.Spread, mib(res.IdleRSS)))
	if err := rig.offerAndConverge(ctx, n, o, tr, res); err != nil {
		return errors.Join(err, f.Errs())
	}
	if rig.broker.Exited() {
		return fmt.Errorf("mosquitto exited during the run: %s", rig.broker.Log())
	}
	return nil
}

// rig is what a fleet run talks to: the broker, the image's server, the
// release key that signs its offer and the directory devices trust.
type rig struct {
	broker *mosquittotest.Broker
	img    []byte
	srv    *imageServer
	sg     *releases
	keys   string
}

func startRig(ctx context.Context, dir string, o fleetOptions) (_ *rig, err error) {
	r := &rig{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.broker, err = startBroker(ctx, dir, o.nodelay); err != nil {
		return nil, err
	}
	var img bytes.Buffer
	if err := demo.WriteImage(&img, demo.ImageSpec{Version: "fleet.1", Seed: 42, Size: o.imageSize}); err != nil {
		return nil, err
	}
	r.img = img.Bytes()
	if r.srv, err = serveImage(r.img); err != nil {
		return nil, err
	}
	if r.sg, err = newReleases(dir, r.srv.url); err != nil {
		return nil, err
	}
	r.keys = filepath.Join(dir, "keys")
	if err := os.MkdirAll(r.keys, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(r.keys, "release.pub"), r.sg.PublicKeyPEM, 0o644); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rig) close() {
	if r.srv != nil {
		r.srv.srv.Close()
	}
	if r.broker != nil {
		r.broker.Stop()
	}
}

// sampleBroker samples the broker's and this process's memory until the
// returned stop is called, which hands the peaks to done.
func sampleBroker(ctx context.Context, brokerPID int, done func(peaks, error)) (stop func()) {
	smp := &sampler{brokerPID: brokerPID, every: 250 * time.Millisecond}
	smpCtx, stopSampling := context.WithCancel(ctx)
	smpDone := make(chan struct{})
	go func() { defer close(smpDone); smp.run(smpCtx) }()
	return func() {
		stopSampling()
		<-smpDone
		done(smp.peaks())
	}
}

// offerAndConverge publishes the group's offer and waits until every
// device reports success, recording each one's time and the downloads.
func (r *rig) offerAndConverge(ctx context.Context, n int, o fleetOptions, tr *tracker, res *fleetResult) error {
	sum := sha256.Sum256(r.img)
	offer := rollout.Ref{ID: fmt.Sprintf("rel-fleet-%d", n), SHA256: hex.EncodeToString(sum[:])}
	env, err := r.sg.offer(offer.ID, "fleet.1", "fleet.img", o.imageSize, offer.SHA256, time.Now().Add(-time.Minute))
	if err != nil {
		return err
	}
	tr.begin(offer)
	if err := mqtt.PublishRetained(ctx, mqtt.Config{Broker: r.broker.URL}, "ota/groups/"+group+"/desired", env); err != nil {
		return err
	}
	convErr := waitFor(ctx, o.timeout, n, "devices with success", func() int { _, s := tr.counts(); return s })
	tr.mu.Lock()
	var each []time.Duration
	for _, d := range tr.success {
		each = append(each, d)
		res.Converge = max(res.Converge, d)
	}
	tr.mu.Unlock()
	res.Succeeded = len(each)
	res.PerDevice = summarize(each)
	res.Downloads = r.srv.downloads(n)
	return convErr
}

// resetPeakRSS resets this process's VmHWM to its VmRSS (Linux 4.0+), so
// each fleet size's peak is its own.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }
