package node

import (
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
	"github.com/otad/otad/verify"
)

type checker struct {
	keys    *Keys
	devices map[ota.Slot]string
	policy  verify.Policy
	clock   agent.Clock
}

func (c *checker) Check(raw []byte, f agent.Facts) (agent.Target, error) {
	now := time.Now().UTC()
	if c.clock != nil {
		now = c.clock.Now()
	}
	if now.Before(f.ClockFloor) {
		now = f.ClockFloor // no RTC, booted at 1970: expired offers stay expired
	}
	dev := c.devices[f.InactiveSlot]
	size, err := slots.Capacity(dev)
	if err != nil {
		return agent.Target{}, ota.Errorf(ota.CodeTooBigForSlot, "slot %s (%s): %w", f.InactiveSlot, dev, err)
	}
	off, err := verify.Check(raw, c.keys.Keyring(), c.policy, verify.Facts{
		Now: now, SecurityFloor: f.SecurityFloor, NewestIssuedAt: f.NewestIssuedAt, InactiveSlotSize: size,
	})
	var t agent.Target
	if off != nil {
		// Authentic and well formed, even when refused: the status names it.
		t = target(&off.Manifest)
		t.ManifestSHA256 = off.Digest()
	}
	if err != nil && ota.CodeOf(err) == "" {
		err = ota.Wrap(ota.CodeBadEnvelope, err)
	}
	return t, err
}

func target(m *verify.Manifest) agent.Target {
	return agent.Target{
		ID: m.ID, Version: m.Version, SecurityVersion: m.SecurityVersion, IssuedAt: m.IssuedAt,
		Payload: agent.Payload{URL: m.Payload.URL, Compression: m.Payload.Compression, Size: m.Payload.Size,
			SHA256: m.Payload.SHA256, DownloadSize: m.Payload.DownloadSize, Chunks: m.Payload.Chunks},
	}
}
