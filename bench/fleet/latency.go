package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/sim/demo"
	"github.com/otad/otad/sim/device"
)

// latencyResult is the offer-to-downloading latency over the measured offers.
type latencyResult struct {
	First   time.Duration // the uncounted first offer, from idle
	Samples []time.Duration
	Summary summary
}

// devicePrefix is how the bench's device IDs start; the observer filters on it.
const devicePrefix = "bench-"

// newDevice lays out one simulated device under dir/ID.
func newDevice(dir, id, brokerURL string, groups []string, slotSize int64, trusted []byte) (*device.Device, error) {
	return device.New(device.Spec{
		ID: id, Dir: filepath.Join(dir, id), Compatible: compatible, Broker: brokerURL, Groups: groups,
		SlotSize: slotSize, TrustedKey: trusted, CommitWindow: 30 * time.Second,
	}, "fleetbench")
}

// eventWatcher is the cloud side of the latency run: it publishes offers and
// hears the device's events and status on one connection.
type eventWatcher struct {
	c      paho.Client
	events chan timedEvent

	mu     sync.Mutex
	status ota.Status
}

type timedEvent struct {
	at time.Time
	ev ota.Event
}

func watchDevice(ctx context.Context, brokerURL, id string) (*eventWatcher, error) {
	w := &eventWatcher{events: make(chan timedEvent, 4096)}
	opts := paho.NewClientOptions().AddBroker(brokerURL).SetClientID("fleetbench-latency").SetCleanSession(true).
		SetOrderMatters(false) // handlers run at once; they only stamp and queue
	w.c = paho.NewClient(opts)
	if err := waitToken(ctx, w.c.Connect()); err != nil {
		return nil, fmt.Errorf("latency observer: connect %s: %w", brokerURL, err)
	}
	filters := map[string]byte{"ota/devices/" + id + "/events": 1, "ota/devices/" + id + "/status": 1}
	tok := w.c.SubscribeMultiple(filters, func(_ paho.Client, m paho.Message) {
		at := time.Now()
		switch m.Topic() {
		case "ota/devices/" + id + "/events":
			var ev ota.Event
			if json.Unmarshal(m.Payload(), &ev) == nil {
				select {
				case w.events <- timedEvent{at: at, ev: ev}:
				default: // nobody is reading: the run is over
				}
			}
		default:
			var st ota.Status
			if json.Unmarshal(m.Payload(), &st) == nil {
				w.mu.Lock()
				if st.Seq >= w.status.Seq {
					w.status = st
				}
				w.mu.Unlock()
			}
		}
	})
	if err := waitToken(ctx, tok); err != nil {
		w.c.Disconnect(100)
		return nil, fmt.Errorf("latency observer: subscribe: %w", err)
	}
	return w, nil
}

func (w *eventWatcher) lastStatus() ota.Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

// waitToken waits for a paho token, bounded by ctx and 30 s.
func waitToken(ctx context.Context, tok paho.Token) error {
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return errors.New("no answer from the broker in 30s")
	}
}

// awaitDownloading waits for the event that starts the install of offer id.
func (w *eventWatcher) awaitDownloading(ctx context.Context, id string, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		select {
		case te := <-w.events:
			// A superseding offer also emits downloading→downloading for the
			// old install with result "superseded"; the new install's start
			// carries the new ID and no result.
			if te.ev.To == ota.Downloading && te.ev.ID == id && te.ev.Result == "" {
				return te.at, nil
			}
			if te.ev.To == ota.Verifying {
				// The measurement is of interrupting transfers in flight.
				return time.Time{}, fmt.Errorf("offer %s: a download finished (%s): the image server is too fast for this measurement", id, te.ev.ID)
			}
			if te.ev.ID == id && te.ev.Result != "" {
				return time.Time{}, fmt.Errorf("offer %s ended %s %s: %s", id, te.ev.Result, te.ev.Code, te.ev.Message)
			}
		case <-deadline:
			return time.Time{}, fmt.Errorf("offer %s: no downloading event in %v (status %+v)", id, timeout, w.lastStatus())
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

type latencyOptions struct {
	n         int
	gap       time.Duration
	imageSize int64
	rate      int64
	nodelay   bool
}

// runLatency runs one device against its own mosquitto and times offer after
// offer, each superseding the install the one before started.
func runLatency(ctx context.Context, dir string, o latencyOptions, progress func(string)) (res latencyResult, err error) {
	b, err := startBroker(ctx, dir, o.nodelay)
	if err != nil {
		return res, err
	}
	defer b.Stop()
	www := filepath.Join(dir, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		return res, fmt.Errorf("image directory: %w", err)
	}
	// Slow on purpose: no install may finish while offers keep coming.
	srv, err := demo.StartFileServer(www, o.rate)
	if err != nil {
		return res, err
	}
	defer closeServer(srv)
	sg, err := newReleases(www, srv.URL)
	if err != nil {
		return res, err
	}
	id := devicePrefix + "latency"
	dev, err := newDevice(dir, id, b.URL, nil, o.imageSize+1<<20, sg.PublicKeyPEM)
	if err != nil {
		return res, err
	}
	w, err := watchDevice(ctx, b.URL, id)
	if err != nil {
		return res, err
	}
	defer w.c.Disconnect(100)

	devCtx, stopDev := context.WithCancel(ctx)
	devDone := make(chan struct{})
	go func() { defer close(devDone); dev.Run(devCtx) }()
	defer func() { stopDev(); <-devDone }()

	if err := awaitIdle(w, id, dev); err != nil {
		return res, err
	}

	issued := time.Now().Add(-time.Hour) // in the past, and later for every offer
	prev := ""
	for i := 0; i <= o.n; i++ {
		name := fmt.Sprintf("lat-%04d.img", i)
		d, err := supersede(ctx, w, sg, id, i, name, o.imageSize, issued)
		if err != nil {
			return res, err
		}
		if i == 0 {
			res.First = d // from idle: not a supersede, not counted
		} else {
			res.Samples = append(res.Samples, d)
		}
		if prev != "" {
			_ = os.Remove(filepath.Join(www, prev)) // superseded: its download was cancelled
		}
		prev = name
		if i%50 == 0 && i > 0 {
			progress(fmt.Sprintf("latency: %d/%d offers, median so far %s ms", i, o.n, ms(percentile(res.Samples, 50))))
		}
		// Let the download get going, so the next offer interrupts a transfer.
		select {
		case <-time.After(o.gap):
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	res.Summary = summarize(res.Samples)
	return res, nil
}

// awaitIdle waits, up to 30 s, for the device to report idle on slot A.
func awaitIdle(w *eventWatcher, id string, dev *device.Device) error {
	deadline := time.Now().Add(30 * time.Second)
	for st := w.lastStatus(); st.State != ota.Idle || st.BootedSlot != "A"; st = w.lastStatus() {
		if time.Now().After(deadline) {
			return fmt.Errorf("device %s not idle on slot A after 30s (status %+v, agent error %v)", id, st, dev.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// supersede publishes offer i for the device and returns how long it took
// the device to start downloading it.
func supersede(ctx context.Context, w *eventWatcher, sg *releases, id string, i int, name string, size int64, issued time.Time) (time.Duration, error) {
	sum, err := sg.image(name, demo.ImageSpec{Version: fmt.Sprintf("lat.%d", i), Seed: uint64(i + 1), Size: size})
	if err != nil {
		return 0, err
	}
	offerID := fmt.Sprintf("rel-lat-%04d", i)
	env, err := sg.offer(offerID, fmt.Sprintf("lat.%d", i), name, size, sum, issued.Add(time.Duration(i)*time.Second))
	if err != nil {
		return 0, err
	}
	start := time.Now()
	tok := w.c.Publish("ota/devices/"+id+"/desired", 1, true, env)
	at, err := w.awaitDownloading(ctx, offerID, 30*time.Second)
	if err != nil {
		return 0, err
	}
	if err := waitToken(ctx, tok); err != nil {
		return 0, fmt.Errorf("publish offer %s: %w", offerID, err)
	}
	return at.Sub(start), nil
}

func closeServer(s *demo.FileServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.Close(ctx)
}
