package verify

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/otad/otad/ota"
)

// maxSignatures bounds the work one envelope can cause: without a keyid every
// signature is tried against every trusted key.
const maxSignatures = 32

// Signature is one signature over the raw manifest bytes. Sig is base64 in JSON.
type Signature struct {
	KeyID string `json:"keyid,omitempty"`
	Sig   []byte `json:"sig"`
}

// Envelope is the signed offer of docs/contract/formats.md. Manifest holds the exact signed bytes
// (base64 in JSON).
type Envelope struct {
	Manifest   []byte      `json:"manifest"`
	Signatures []Signature `json:"signatures"`
	// Root is the chain of roots of trust the offer needs
	// (docs/contract/trust.md), carried as it is: no signature here covers
	// it, each root is checked by the chain rule on its own.
	Root json.RawMessage `json:"root,omitempty"`
}

// ParseEnvelope runs checks 1 and 2 of docs/contract/checks.md: the size limit, then the envelope's
// JSON shape (manifest present, at least one signature). The manifest itself is not
// looked at: that waits until its signatures verify.
func ParseEnvelope(raw []byte) (*Envelope, error) {
	if len(raw) > ota.MaxEnvelopeSize {
		return nil, refuse(ota.CodeTooLarge, "", fmt.Sprintf("envelope is over the limit of %d bytes", ota.MaxEnvelopeSize)) // its size is unknown: ReadEnvelope stops one byte past the limit
	}
	// Decode base64 ourselves so a bad value is reported with its field.
	var in struct {
		Manifest   *string `json:"manifest"`
		Signatures []struct {
			KeyID string `json:"keyid"`
			Sig   string `json:"sig"`
		} `json:"signatures"`
		Root json.RawMessage `json:"root"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, refuseErr(ota.CodeBadEnvelope, jsonErrorField(err), "", err)
	}
	if dup := duplicateKey(raw); dup != "" {
		return nil, refuse(ota.CodeBadEnvelope, dup, "key given twice (keys differing only in case count as one)")
	}
	if in.Manifest == nil || *in.Manifest == "" {
		return nil, refuse(ota.CodeBadEnvelope, "manifest", "missing or empty")
	}
	env := Envelope{Root: in.Root}
	var err error
	if env.Manifest, err = decodeBase64(*in.Manifest); err != nil {
		return nil, refuseErr(ota.CodeBadEnvelope, "manifest", "not base64", err)
	}
	if len(in.Signatures) == 0 {
		return nil, refuse(ota.CodeBadEnvelope, "signatures", "no signatures")
	}
	if len(in.Signatures) > maxSignatures {
		return nil, refuse(ota.CodeBadEnvelope, "signatures", fmt.Sprintf("%d signatures, at most %d allowed", len(in.Signatures), maxSignatures))
	}
	env.Signatures = make([]Signature, len(in.Signatures))
	for i, s := range in.Signatures {
		field := fmt.Sprintf("signatures[%d].sig", i)
		if s.Sig == "" {
			return nil, refuse(ota.CodeBadEnvelope, field, "missing or empty")
		}
		sig, err := decodeBase64(s.Sig)
		if err != nil {
			return nil, refuseErr(ota.CodeBadEnvelope, field, "not base64", err)
		}
		// Key IDs are hex; compare them in one case.
		env.Signatures[i] = Signature{KeyID: strings.ToLower(strings.TrimSpace(s.KeyID)), Sig: sig}
	}
	return &env, nil
}

// MarshalEnvelope wraps manifest bytes and their signatures into an envelope.
func MarshalEnvelope(manifest []byte, sigs ...Signature) ([]byte, error) {
	if len(manifest) == 0 {
		return nil, errors.New("marshal envelope: empty manifest")
	}
	if len(sigs) == 0 {
		return nil, errors.New("marshal envelope: no signatures")
	}
	b, err := json.Marshal(Envelope{Manifest: manifest, Signatures: sigs})
	if err != nil {
		return nil, fmt.Errorf("marshal envelope: %w", err)
	}
	if len(b) > ota.MaxEnvelopeSize {
		return nil, fmt.Errorf("marshal envelope: %d bytes, over the %d byte limit devices accept", len(b), ota.MaxEnvelopeSize)
	}
	return b, nil
}

// AttachRoot returns the envelope raw carrying chain (a root document or
// a JSON array of them) in its "root" field, the manifest and signatures
// as they were.
func AttachRoot(raw, chain []byte) ([]byte, error) {
	env, err := ParseEnvelope(raw)
	if err != nil {
		return nil, err
	}
	if !json.Valid(chain) {
		return nil, errors.New("attach root: the chain is not JSON")
	}
	env.Root = json.RawMessage(chain)
	b, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("attach root: %w", err)
	}
	if len(b) > ota.MaxEnvelopeSize {
		return nil, fmt.Errorf("attach root: %d bytes, over the %d byte limit devices accept", len(b), ota.MaxEnvelopeSize)
	}
	return b, nil
}

// decodeBase64 accepts standard base64 with or without padding (cosign prints it padded).
func decodeBase64(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	b, err := base64.StdEncoding.DecodeString(s)
	if err == nil {
		return b, nil
	}
	if rb, rerr := base64.RawStdEncoding.DecodeString(s); rerr == nil {
		return rb, nil
	}
	return nil, err
}

// jsonErrorField names the JSON path a decoding error is about, when encoding/json says.
func jsonErrorField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	return ""
}
