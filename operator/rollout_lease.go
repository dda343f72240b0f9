package operator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
)

// The lease, seen from otactl: who holds a rollout, and the one client ID
// its controllers share (docs/contract/rollouts.md, one controller per
// rollout).

// checkLease refuses a rollout whose lease another controller holds live
// (or, with takeOver, waits once for it to expire).
func checkLease(ctx context.Context, cfg mqtt.Config, name, holder string, takeOver bool, stderr io.Writer) error {
	for waited := false; ; waited = true {
		_, s, err := rollout.ReadState(ctx, cfg, name)
		if errors.Is(err, rollout.ErrNoState) {
			return nil
		}
		if err != nil {
			return err
		}
		l := s.Lease
		if !l.Live(time.Now()) || l.Holder == holder {
			return nil
		}
		if !takeOver || waited {
			return fmt.Errorf("%w: rollout %s is held by %s; it expires at %s unless renewed", rollout.ErrLeaseHeld, name,
				l.String(), l.Expires().UTC().Format(time.RFC3339))
		}
		wait := time.Until(l.Expires()) + time.Second
		fmt.Fprintf(stderr, "rollout %s is held by %s: waiting %v for its lease to expire\n", name, l.Holder, wait.Round(time.Second))
		select {
		case <-ctx.Done():
			return ctx.Err()
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

// controllerID is the MQTT client ID every controller of a rollout
// connects with: the broker lets one connection have it, so a controller
// that takes a rollout over cuts the last one off (docs/contract/rollouts.md,
// one controller per rollout). At most 88 bytes (AWS IoT Core takes 128).
func controllerID(prefix, name string) string {
	h := sha256.Sum256([]byte(prefix))
	return "otactl-rollout-" + name + "-" + hex.EncodeToString(h[:4])
}
