package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/otad/otad/ota"
)

// Policy is the device's configured offer policy.
type Policy struct {
	DeviceID   string
	Compatible string
	Threshold  int           // distinct trusted keys required; < 1 means 1
	ClockSkew  time.Duration // grace after expires_at
	// SkewAllowance is how far issued_at may be ahead of the clock; 0 means 24h.
	SkewAllowance time.Duration
	Schemes       []string // allowed payload URL schemes; default ["https"] when empty
	// Chunked says the device installs chunked payloads (schema 2, docs/contract/chunked.md); without
	// it a schema-2 manifest is refused with bad_manifest, as by an agent that knows
	// only schema 1.
	Chunked bool
}

// Facts is the device state an offer is judged against.
type Facts struct {
	Now              time.Time
	SecurityFloor    uint64
	NewestIssuedAt   time.Time // zero = no offer accepted yet
	InactiveSlotSize int64     // bytes; 0 = unknown, the size check is then skipped
}

// Offer is an authentic, well-formed offer: its signatures verified and its
// manifest parsed.
type Offer struct {
	Envelope      []byte // the envelope as received
	ManifestBytes []byte // the exact signed manifest bytes
	Manifest      Manifest
}

// Digest is the hex SHA-256 of the signed manifest bytes, which identifies an offer.
func (o *Offer) Digest() string { return digest(o.ManifestBytes) }

func digest(manifest []byte) string {
	sum := sha256.Sum256(manifest)
	return hex.EncodeToString(sum[:])
}

// EnvelopeDigest is the hex SHA-256 of the manifest bytes an envelope carries,
// authentic or not, or "" when the envelope does not decode that far (JSON,
// a single manifest key, base64). A refusal before the manifest is
// authenticated can still name the offer by it; an unauthenticated id cannot
// be trusted, a digest of the bytes received can.
func EnvelopeDigest(raw []byte) string {
	if len(raw) > ota.MaxEnvelopeSize {
		return ""
	}
	var in struct {
		Manifest *string `json:"manifest"`
	}
	if json.Unmarshal(raw, &in) != nil || in.Manifest == nil || *in.Manifest == "" || duplicateKey(raw) != "" {
		return ""
	}
	m, err := decodeBase64(*in.Manifest)
	if err != nil {
		return ""
	}
	return digest(m)
}

// Check runs the eleven checks of docs/contract/checks.md in order and stops at the first failure,
// returning a *ota.Error. The manifest is parsed only after its signatures verify.
// A refusal by checks 5 to 11 comes with the Offer too: it is authentic and well
// formed, so the refusal can name it; earlier refusals come with a nil Offer.
func Check(raw []byte, keys *Keyring, p Policy, f Facts) (*Offer, error) {
	env, err := ParseEnvelope(raw) // 1, 2
	if err != nil {
		return nil, err
	}
	if err := keys.VerifyThreshold(env.Manifest, env.Signatures, p.Threshold); err != nil { // 3
		return nil, err
	}
	m, err := ParseManifest(env.Manifest) // 4
	if err != nil {
		return nil, err
	}
	if m.Schema == schemaChunked && !p.Chunked {
		return nil, refuse(ota.CodeBadManifest, "schema", fmt.Sprintf("version %d is newer than this agent understands (%d)", m.Schema, schemaStream))
	}
	off := &Offer{
		Envelope:      append([]byte(nil), raw...),
		ManifestBytes: env.Manifest,
		Manifest:      *m,
	}
	return off, checkPolicy(m, p, f) // 5-11
}

// DefaultSkewAllowance is how far issued_at may be ahead of the clock (docs/contract/checks.md).
const DefaultSkewAllowance = 24 * time.Hour

func (p Policy) skewAllowance() time.Duration {
	if p.SkewAllowance <= 0 {
		return DefaultSkewAllowance
	}
	return p.SkewAllowance
}

// checkPolicy runs checks 5 to 11 on a parsed manifest.
func checkPolicy(m *Manifest, p Policy, f Facts) error {
	if p.Compatible == "" || !slices.Contains(m.Compatible, p.Compatible) {
		return refuse(ota.CodeIncompatible, "compatible", fmt.Sprintf("%q not in %s", p.Compatible, quoteList(m.Compatible)))
	}
	if m.Devices != nil && !slices.Contains(m.Devices, p.DeviceID) {
		return refuse(ota.CodeNotForThisDevice, "devices", fmt.Sprintf("device %q not listed", p.DeviceID))
	}
	if !m.ExpiresAt.Add(p.ClockSkew).After(f.Now) {
		return refuse(ota.CodeExpired, "expires_at", fmt.Sprintf("expired at %s (now %s, skew allowance %s)",
			m.ExpiresAt.Format(time.RFC3339), f.Now.UTC().Format(time.RFC3339), p.ClockSkew))
	}
	if ahead := p.skewAllowance(); m.IssuedAt.After(f.Now.Add(ahead)) {
		return refuse(ota.CodeNotYetValid, "issued_at", fmt.Sprintf("%s is more than %s ahead of the clock (%s)",
			m.IssuedAt.Format(time.RFC3339), ahead, f.Now.UTC().Format(time.RFC3339)))
	}
	if m.SecurityVersion < f.SecurityFloor {
		return refuse(ota.CodeDowngrade, "security_version", fmt.Sprintf("%d is below the device floor %d", m.SecurityVersion, f.SecurityFloor))
	}
	if !f.NewestIssuedAt.IsZero() && m.IssuedAt.Before(f.NewestIssuedAt) {
		return refuse(ota.CodeStale, "issued_at", fmt.Sprintf("%s is older than the newest accepted offer (%s)",
			m.IssuedAt.Format(time.RFC3339Nano), f.NewestIssuedAt.UTC().Format(time.RFC3339Nano)))
	}
	if f.InactiveSlotSize > 0 && m.Payload.Size > f.InactiveSlotSize {
		return refuse(ota.CodeTooBigForSlot, "payload.size", fmt.Sprintf("%s (%d bytes) do not fit the inactive slot (%s)", ota.HumanSize(m.Payload.Size), m.Payload.Size, ota.HumanSize(f.InactiveSlotSize)))
	}
	if err := checkFromSizes(m.Payload.Chunks, f.InactiveSlotSize); err != nil {
		return err
	}
	schemes := p.Schemes
	if len(schemes) == 0 {
		schemes = []string{"https"}
	}
	urls := [][2]string{{"payload.url", m.Payload.URL}}
	if c := m.Payload.Chunks; c != nil {
		urls = [][2]string{{"payload.chunks.index_url", c.IndexURL}, {"payload.chunks.store_url", c.StoreURL}}
	}
	for _, fu := range urls {
		u, err := url.Parse(fu[1])
		if err != nil { // ParseManifest already parsed it; kept for safety
			return refuseErr(ota.CodeURLNotAllowed, fu[0], "", err)
		}
		if !slices.ContainsFunc(schemes, func(s string) bool { return strings.EqualFold(s, u.Scheme) }) {
			return refuse(ota.CodeURLNotAllowed, fu[0], fmt.Sprintf("scheme %q not allowed (allowed: %s)", u.Scheme, strings.Join(schemes, ", ")))
		}
	}
	return nil
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = fmt.Sprintf("%q", truncate(s))
	}
	return "[" + strings.Join(q, ", ") + "]"
}
