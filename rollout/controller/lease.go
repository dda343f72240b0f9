package controller

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/seen"
)

// The lease, seen from the world: who holds a rollout, and the one client ID
// its controllers share (docs/contract/rollouts.md, one controller per
// rollout).

// checkLease reads the rollout's lease before anything connects as its
// controller (docs/contract/rollouts.md, one controller per rollout). One
// whose holder is proven gone (holderGone) is named, to be taken at once.
// Any other lease held by another controller is refused at once (exit 4)
// unless takeOver: then it is waited out, at most its TTL, saying so, and
// taken over, or refused once it is renewed meanwhile. Two controllers
// started together must not both go on: waiting by default let a late
// renewal of the first land after the second had taken over (two writers,
// seen under load). After this controller's claim was read back as lost
// (lostClaim), another's lease is refused even once released or expired:
// the broker kept that claim, and its holder may have ended the rollout
// meanwhile — a claim over it would publish again after another did. It
// returns the holder proven gone, if any.
func checkLease(ctx context.Context, cfg mqtt.Config, trust rollout.Trust, counters *seen.Store, name, holder string, here where, takeOver, lostClaim bool, stderr io.Writer) (gone string, err error) {
	var first *rollout.Lease
	for {
		// A forged copy is not reported here: the controller reads the
		// same retained message again once connected (retained) and
		// reports it there, once, rather than once per read.
		_, s, err := readState(ctx, cfg, trust, name, false)
		if errors.Is(err, ErrNoState) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		// A replayed state's lease is not waited for, nor taken over.
		if err := counters.Check(CountersKey(cfg, name), seen.State, mqtt.Topics{Prefix: cfg.TopicPrefix}.RolloutState(name), s.Counter()); err != nil {
			return "", refuse("%w; not going on from it (docs/contract/rollouts.md, a signed control plane)", err)
		}
		l := s.Lease
		if lostClaim && l != nil && l.Holder != holder {
			return "", fmt.Errorf("%w: rollout %s: the claim of %s was kept over this controller's (docs/contract/rollouts.md, two started at once)",
				rollout.ErrLeaseHeld, name, l.String())
		}
		if !l.Live(time.Now()) || l.Holder == holder {
			return "", nil
		}
		if first != nil && (l.Holder != first.Holder || l.Epoch != first.Epoch || l.Renewed.After(first.Renewed)) {
			return "", fmt.Errorf("%w: rollout %s is held by %s, renewed while this controller waited; it expires at %s unless renewed",
				rollout.ErrLeaseHeld, name, l.String(), l.Expires().UTC().Format(time.RFC3339))
		}
		if why, ok := holderGone(l, here); ok {
			fmt.Fprintf(stderr, "rollout %s: its controller %s is gone (%s): taking the rollout over at once\n", name, l.Holder, why)
			return l.Holder, nil
		}
		if !takeOver {
			return "", fmt.Errorf("%w: rollout %s is held by %s; it expires at %s unless renewed (--take-over waits it out)", rollout.ErrLeaseHeld, name,
				l.String(), l.Expires().UTC().Format(time.RFC3339))
		}
		if first == nil {
			first = l
			fmt.Fprintf(stderr, "rollout %s is held by %s, last renewed %s: waiting until %s (its lease's TTL of %v) for it to be renewed (then it is live: exit 4) or to expire (then this controller takes over)\n",
				name, l.Holder, l.Renewed.UTC().Format(time.RFC3339), l.Expires().UTC().Format(time.RFC3339), l.TTL())
		}
		// Read again after a renewal is due, or once it has expired.
		wait := min(time.Until(l.Expires()), l.TTL()/3) + time.Second
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(wait):
		}
	}
}

// holderName names this controller in the lease: who, where, which
// process, and a random tag (pids repeat across machines and boots).
func holderName() string {
	host, _ := os.Hostname()
	user := os.Getenv("USER")
	if user == "" {
		user = "otactl"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s@%s pid %d %s", user, host, os.Getpid(), hex.EncodeToString(b[:]))
}

// where is the process a controller runs as, recorded in its lease.
type where struct {
	host, bootID string
	pid          int
}

// thisProcess is where this controller runs; bootID is "" where the
// kernel does not say (then no holder can be proven gone).
func thisProcess() where {
	host, _ := os.Hostname()
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return where{host: host, bootID: strings.TrimSpace(string(b)), pid: os.Getpid()}
}

// holderGone reports whether a lease's holder is proven gone: it ran on
// this host in this boot, and its process is not running (no such pid, or
// a zombie). A pid reused since by another process is taken for the
// holder: the lease is then waited out, never taken from a live one.
func holderGone(l *rollout.Lease, here where) (string, bool) {
	if l.Host == "" || l.Host != here.host || l.BootID == "" || l.BootID != here.bootID || l.PID <= 0 || l.PID == here.pid {
		return "", false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", l.PID))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("pid %d is not running on %s since boot %s", l.PID, l.Host, bootShort(l.BootID)), true
	case err != nil:
		return "", false
	}
	// The state follows the command's closing parenthesis.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return fmt.Sprintf("pid %d on %s has exited", l.PID, l.Host), true
	}
	return "", false
}

func bootShort(id string) string { return id[:min(len(id), 8)] }

// ClientID is the MQTT client ID every controller of a rollout
// publishes with, once it has read its claim of the lease back (fence):
// the broker lets one connection have it, so a controller that takes a
// rollout over cuts the last one off, and one refused never has it
// (docs/contract/rollouts.md, one controller per rollout). At most 88
// bytes (AWS IoT Core takes 128).
func ClientID(prefix, name string) string {
	h := sha256.Sum256([]byte(prefix))
	return "otactl-rollout-" + name + "-" + hex.EncodeToString(h[:4])
}
