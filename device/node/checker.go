package node

import (
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
	"github.com/otad/otad/verify"
)

type checker struct {
	keys   *Keys
	slots  map[ota.Slot]slots.Target
	policy verify.Policy
	clock  agent.Clock
}

// newChecker is the offer checks of cfg's policy on the trusted keys and
// the slots' capacity.
func newChecker(cfg *config.Config, keys *Keys, targets map[ota.Slot]slots.Target, clock agent.Clock) *checker {
	dl := cfg.Download
	return &checker{keys: keys, slots: targets, clock: clock, policy: verify.Policy{
		DeviceID: cfg.DeviceID, Compatible: cfg.Compatible, Threshold: cfg.Trust.Threshold,
		ClockSkew: cfg.Trust.ClockSkew.Duration, Schemes: dl.Schemes, SkewAllowance: cfg.Trust.SkewAllowance.Duration,
		Chunked: true,
	}}
}

func (c *checker) Check(raw []byte, f agent.Facts) (agent.Target, error) {
	now := time.Now().UTC()
	if c.clock != nil {
		now = c.clock.Now()
	}
	if now.Before(f.ClockFloor) {
		now = f.ClockFloor // no RTC, booted at 1970: expired offers stay expired
	}
	size, err := c.capacity(f.InactiveSlot)
	if err != nil {
		return agent.Target{}, err
	}
	off, err := verify.Check(raw, c.keys.Keyring(), c.policy, verify.Facts{
		Now: now, SecurityFloor: f.SecurityFloor, NewestIssuedAt: f.NewestIssuedAt, InactiveSlotSize: size,
	})
	var t agent.Target
	if off != nil {
		// Authentic and well formed, even when refused: the status names it.
		t = target(&off.Manifest)
		t.ManifestSHA256 = off.Digest()
	} else {
		// Not authenticated: no id, but the bytes received are named by their digest.
		t.ManifestSHA256 = verify.EnvelopeDigest(raw)
	}
	if err != nil && ota.CodeOf(err) == "" {
		err = ota.Wrap(ota.CodeBadEnvelope, err)
	}
	return t, err
}

func target(m *verify.Manifest) agent.Target {
	return agent.Target{
		ID: m.ID, Version: m.Version, SecurityVersion: m.SecurityVersion, IssuedAt: m.IssuedAt,
		ExpiresAt: m.ExpiresAt, Payload: m.Payload,
	}
}

func (c *checker) capacity(slot ota.Slot) (int64, error) {
	t := c.slots[slot]
	if t == nil {
		return 0, ota.Errorf(ota.CodeTooBigForSlot, "slot %s: no device configured for it", slot)
	}
	size, err := t.Capacity()
	if err != nil {
		return 0, ota.Errorf(ota.CodeTooBigForSlot, "slot %s (%s): %w", slot, t.Name(), err)
	}
	return size, nil
}
