package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/fetch"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/sim/device"
	"github.com/otad/otad/trust"
)

// Options are otasim fleet's flags.
type Options struct {
	Broker     string
	Brokers    []string // the nodes of a clustered broker, instead of Broker: each device starts at a random one
	Devices    int
	KeysDir    string   // the public keys the devices trust
	Root       string   // instead, the root of trust they ship ([trust] root): each walks its own chain, in memory
	Prefix     string   // device IDs are Prefix + a 5-digit number from 00001; "": "sim-"
	Group      string   // "": in no group
	Compatible string   // default "otasim"
	FailHealth float64  // percent of devices whose health check fails, by a stable hash of the ID
	FailIDs    []string // devices whose health check fails, besides those FailHealth picks
	// MaxInstalls bounds the installs at once; 0: DefaultMaxInstalls.
	MaxInstalls int
	SlotSize    int64         // each slot's capacity; 0: 1 GiB (it costs no memory)
	Spread      time.Duration // devices start at random times within this; 0: 1 ms per device
	Commit      time.Duration // the commit window; 0: 30 s
	Logger      *slog.Logger  // the agents' log; nil: warnings and errors to nowhere
	// Observe is given every status a device publishes (device.Shared).
	Observe func(ota.Status)
}

// DefaultMaxInstalls is the bound on installs at once: each install holds
// its image and its pipeline's buffers (about 2 MiB for a 1 MiB image).
const DefaultMaxInstalls = 64

// Fleet is the simulated devices, ready to run.
type Fleet struct {
	Devices     []*device.MemDevice
	Failing     []string // the devices whose health check fails
	MaxInstalls int
	Spread      time.Duration
	transport   *http.Transport
}

// FailsHealth reports whether id is among the pct percent of devices
// whose health check fails: a hash of the ID alone, so the same devices
// fail every run, and growing pct only adds devices.
func FailsHealth(id string, pct float64) bool {
	if pct <= 0 {
		return false
	}
	h := sha256.Sum256([]byte("otasim fail-health\x00" + id))
	return float64(binary.BigEndian.Uint64(h[:8])>>11)/(1<<53) < pct/100
}

// ID is the name of device i (from 1).
func ID(prefix string, i int) string { return fmt.Sprintf("%s%05d", prefix, i) }

// New builds the fleet's devices; nothing connects until Run.
func New(o Options) (*Fleet, error) {
	switch {
	case o.Devices < 1:
		return nil, fmt.Errorf("--devices %d: want at least 1", o.Devices)
	case o.FailHealth < 0 || o.FailHealth > 100:
		return nil, fmt.Errorf("--fail-health %g: want a percentage, 0 to 100", o.FailHealth)
	case o.MaxInstalls < 0:
		return nil, fmt.Errorf("--max-installs %d: want 1 or more (0: %d)", o.MaxInstalls, DefaultMaxInstalls)
	}
	o = o.withDefaults()
	ids := make([]string, o.Devices)
	for i := range ids {
		ids[i] = ID(o.Prefix, i+1)
	}
	for _, id := range o.FailIDs {
		if !slices.Contains(ids, id) {
			return nil, fmt.Errorf("--fail-devices: %q is not one of the fleet's devices (%s to %s)", id, ids[0], ids[len(ids)-1])
		}
	}
	var groups []string
	if o.Group != "" {
		groups = []string{o.Group}
	}
	cfg, err := device.MemoryConfig(device.Spec{
		ID: "config-check", Compatible: o.Compatible, Broker: o.Broker, Brokers: o.Brokers, Groups: groups, CommitWindow: o.Commit,
		Download: config.Download{Schemes: []string{"http", "https", "file"}},
	})
	if err != nil {
		return nil, err
	}
	keys, root, err := o.trust(cfg)
	if err != nil {
		return nil, err
	}
	tr := fetch.NewHTTPClient(nil).Transport.(*http.Transport)
	// Installs at once share connections to the image server.
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = o.MaxInstalls, o.MaxInstalls
	sh := &device.Shared{Config: cfg, Keys: keys, Root: root, Transport: tr, Installs: make(chan struct{}, o.MaxInstalls),
		Slots:        device.NewMemPool(2 * o.MaxInstalls),
		AgentVersion: "otasim", Logger: o.Logger, Observe: o.Observe}
	f := &Fleet{MaxInstalls: o.MaxInstalls, Spread: o.Spread, transport: tr}
	for _, id := range ids {
		fails := FailsHealth(id, o.FailHealth) || slices.Contains(o.FailIDs, id)
		d, err := device.NewMemDevice(sh, id, o.SlotSize, !fails)
		if err != nil {
			return nil, err
		}
		if fails {
			f.Failing = append(f.Failing, id)
		}
		f.Devices = append(f.Devices, d)
	}
	return f, nil
}

// trust reads what the devices trust: the keys of KeysDir, or the root of
// trust Root names, which cfg then names too (the daemon subscribes to the
// retained roots of a device that has one).
func (o Options) trust(cfg *config.Config) (*node.Keys, *trust.Root, error) {
	switch {
	case o.Root != "" && o.KeysDir != "":
		return nil, nil, errors.New("--keys and --root do not go together: a device with a root of trust reads no keys directory")
	case o.Root != "":
		path, err := filepath.Abs(o.Root)
		if err != nil {
			return nil, nil, fmt.Errorf("--root: %w", err)
		}
		root, err := node.ReadAnchor(path)
		if err != nil {
			return nil, nil, fmt.Errorf("--root: %w", err)
		}
		cfg.Trust.Root = path
		return nil, root, nil
	}
	keys, err := node.LoadKeys(o.KeysDir, o.Logger)
	if err != nil {
		return nil, nil, err
	}
	if keys.Keyring().Len() == 0 {
		return nil, nil, fmt.Errorf("--keys %s: no public key in it", o.KeysDir)
	}
	return keys, nil, nil
}

func (o Options) withDefaults() Options {
	if o.Compatible == "" {
		o.Compatible = "otasim"
	}
	if o.Prefix == "" {
		o.Prefix = "sim-"
	}
	if o.MaxInstalls == 0 {
		o.MaxInstalls = DefaultMaxInstalls
	}
	if o.SlotSize == 0 {
		o.SlotSize = 1 << 30
	}
	if o.Spread == 0 {
		o.Spread = time.Duration(o.Devices) * time.Millisecond
	}
	if o.Commit == 0 {
		o.Commit = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Run runs every device until ctx ends, each starting (and connecting) at
// a random time within the spread, as a real fleet's devices power on.
func (f *Fleet) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, d := range f.Devices {
		wait := time.Duration(0)
		if f.Spread > 0 {
			wait = rand.N(f.Spread)
		}
		wg.Go(func() {
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			d.Run(ctx)
		})
	}
	wg.Wait()
	f.transport.CloseIdleConnections()
	return nil
}

// Errs lists the first few errors devices' agents stopped with.
func (f *Fleet) Errs() error {
	var errs []error
	for _, d := range f.Devices {
		if err := d.Err(); err != nil && len(errs) < 3 {
			errs = append(errs, fmt.Errorf("%s: %w", d.ID, err))
		}
	}
	return errors.Join(errs...)
}
