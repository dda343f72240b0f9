package node

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
	c.keys.takeCarried(raw)
	tr := c.keys.Current()
	policy := c.policyOf(tr)
	if f.PayloadGiven {
		// The signed URLs are never fetched: the scheme rule is for them.
		policy.Schemes = ota.Schemes()
	}
	off, err := verify.Check(raw, tr.Keyring, policy, verify.Facts{
		Now: now, SecurityFloor: f.SecurityFloor, NewestIssuedAt: f.NewestIssuedAt, InactiveSlotSize: size,
	})
	err = namedRevoked(err, raw, tr)
	var t agent.Target
	if off != nil {
		// Authentic and well formed, even when refused: the status names it.
		t = target(&off.Manifest)
		t.ManifestSHA256 = off.Digest()
		t.Retry = verify.EnvelopeAttempt(raw)
	} else {
		// Not authenticated: no id, but the bytes received are named by their digest.
		t.ManifestSHA256 = verify.EnvelopeDigest(raw)
	}
	if err != nil && ota.CodeOf(err) == "" {
		err = ota.Wrap(ota.CodeBadEnvelope, err)
	}
	return t, err
}

// policyOf is the policy with the release threshold of tr's root, when
// there is one (docs/contract/trust.md rule 5).
func (c *checker) policyOf(tr *Trusted) verify.Policy {
	p := c.policy
	if tr.Threshold > 0 {
		p.Threshold = tr.Threshold
	}
	return p
}

// CheckTrust is agent.TrustChecker: checks 1 to 3 again, with the keys
// trusted now, before the flip.
func (c *checker) CheckTrust(raw []byte) error {
	tr := c.keys.Current()
	env, err := verify.ParseEnvelope(raw)
	if err == nil {
		err = tr.Keyring.VerifyThreshold(env.Manifest, env.Signatures, c.policyOf(tr).Threshold)
	}
	return namedRevoked(err, raw, tr)
}

// namedRevoked gives a bad_signature refusal the revoked keys that signed
// the offer, with the root that dropped each: the operator reads why an
// offer that verified yesterday does not today.
func namedRevoked(err error, raw []byte, tr *Trusted) error {
	if ota.CodeOf(err) != ota.CodeBadSignature || len(tr.Revoked) == 0 {
		return err
	}
	env, perr := verify.ParseEnvelope(raw)
	if perr != nil {
		return err
	}
	var names []string
	for _, s := range env.Signatures {
		if _, ok := tr.Revoked[s.KeyID]; ok && !slices.Contains(names, s.KeyID) {
			names = append(names, s.KeyID)
		}
	}
	if len(names) == 0 {
		return err
	}
	var b strings.Builder
	for i, id := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "key %s was revoked by root version %d", id, tr.Revoked[id])
	}
	var e *ota.Error
	if errors.As(err, &e) && e.Err != nil {
		return ota.FieldErrorf(ota.CodeBadSignature, e.Field, "%s; %w", b.String(), e.Err)
	}
	return ota.FieldErrorf(ota.CodeBadSignature, "signatures", "%s", b.String())
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
