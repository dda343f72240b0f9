package trust

import (
	"bytes"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// Limits of a root document (docs/contract/trust.md): they bound the work a
// hostile one can cause.
const (
	MaxRootSize   = 64 << 10
	MaxRoleKeys   = 16
	MaxSignatures = 32
	// Type is the signed part's "type": it keeps a root's signature from
	// being taken for anything else a key might sign.
	Type = "otad-root"
)

// Role is one role's keys and how many of them must sign.
type Role struct {
	Threshold int
	Keys      []verify.Key
}

// Keyring is the role's keys as a verify keyring.
func (r Role) Keyring() *verify.Keyring { return verify.NewKeyring(r.Keys...) }

// Has says whether the key with this ID belongs to the role.
func (r Role) Has(id string) bool {
	for _, k := range r.Keys {
		if k.ID == id {
			return true
		}
	}
	return false
}

// Root is a parsed root document. Signatures are over Signed(), the
// canonical encoding of everything else.
type Root struct {
	Version    uint64
	Root       Role
	Release    Role
	Operator   Role // no keys: no operator role
	Signatures []verify.Signature
}

// The wire form. Keys are objects so that a reader sees which key is which
// without computing IDs; the ID must match the key.
type wireKey struct {
	KeyID     string `json:"keyid"`
	PublicKey string `json:"public_key"`
}

type wireRole struct {
	Threshold int       `json:"threshold"`
	Keys      []wireKey `json:"keys"`
}

type wireSigned struct {
	Type     string    `json:"type"`
	Version  uint64    `json:"version"`
	Root     wireRole  `json:"root"`
	Release  wireRole  `json:"release"`
	Operator *wireRole `json:"operator,omitempty"`
}

type wireSig struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"`
}

type wireDoc struct {
	Signed     *wireSigned `json:"signed"`
	Signatures []wireSig   `json:"signatures"`
}

func bad(field, format string, args ...any) *ota.Error {
	return ota.FieldErrorf(ota.CodeBadRoot, field, format, args...)
}

// Parse reads a root document strictly: within MaxRootSize, no unknown
// field, no key given twice, nothing after the document, every rule of a
// well-formed root (thresholds, distinct keys, roles kept apart). It does
// not verify signatures: Verify, Anchor and Walk do. Every refusal is an
// *ota.Error with code bad_root naming the field.
func Parse(b []byte) (*Root, error) {
	if len(b) > MaxRootSize {
		return nil, bad("", "%d bytes, over the limit of %d", len(b), MaxRootSize)
	}
	if dup := verify.DuplicateKey(b); dup != "" {
		return nil, bad(dup, "key given twice (keys differing only in case count as one)")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w wireDoc
	if err := dec.Decode(&w); err != nil {
		return nil, decodeError(b, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("", "data after the document")
	}
	if w.Signed == nil {
		return nil, bad("signed", "missing")
	}
	r, err := fromWire(w.Signed)
	if err != nil {
		return nil, err
	}
	if len(w.Signatures) > MaxSignatures {
		return nil, bad("signatures", "%d signatures, at most %d", len(w.Signatures), MaxSignatures)
	}
	seen := map[string]bool{}
	for i, s := range w.Signatures {
		field := fmt.Sprintf("signatures[%d]", i)
		id := strings.ToLower(s.KeyID)
		if !isKeyID(id) {
			return nil, bad(field+".keyid", "want 64 hex digits, got %q", trunc(s.KeyID))
		}
		if seen[id] {
			return nil, bad(field+".keyid", "key %s signed twice", id)
		}
		seen[id] = true
		sig, err := base64.StdEncoding.DecodeString(s.Sig)
		if err != nil || len(sig) == 0 {
			return nil, bad(field+".sig", "want non-empty base64")
		}
		r.Signatures = append(r.Signatures, verify.Signature{KeyID: id, Sig: sig})
	}
	return r, nil
}

func fromWire(w *wireSigned) (*Root, error) {
	if w.Type != Type {
		return nil, bad("signed.type", "want %q, got %q", Type, trunc(w.Type))
	}
	if w.Version < 1 {
		return nil, bad("signed.version", "want 1 or more")
	}
	r := &Root{Version: w.Version}
	var err error
	if r.Root, err = roleFromWire("signed.root", &w.Root, true); err != nil {
		return nil, err
	}
	if r.Release, err = roleFromWire("signed.release", &w.Release, true); err != nil {
		return nil, err
	}
	if w.Operator != nil {
		if r.Operator, err = roleFromWire("signed.operator", w.Operator, false); err != nil {
			return nil, err
		}
	}
	return r, r.Check()
}

func roleFromWire(field string, w *wireRole, required bool) (Role, error) {
	if len(w.Keys) == 0 && required {
		return Role{}, bad(field+".keys", "missing or empty")
	}
	role := Role{Threshold: w.Threshold}
	for i, wk := range w.Keys {
		f := fmt.Sprintf("%s.keys[%d]", field, i)
		k, err := verify.ParsePublicKeyPEM([]byte(wk.PublicKey))
		if err != nil {
			return Role{}, bad(f+".public_key", "%v", err)
		}
		if strings.ToLower(wk.KeyID) != k.ID {
			return Role{}, bad(f+".keyid", "%q is not the key's id (%s)", trunc(wk.KeyID), k.ID)
		}
		role.Keys = append(role.Keys, k)
	}
	return role, nil
}

// Check applies the rules of a well-formed root to r (what Parse checks
// after decoding; otactl runs it on what it is about to write): thresholds
// between 1 and the number of keys, at most MaxRoleKeys a role, a key once
// in a role and in one role only.
func (r *Root) Check() error {
	if r.Version < 1 {
		return bad("signed.version", "want 1 or more")
	}
	owner := map[string]string{}
	for _, role := range []struct {
		name     string
		r        Role
		optional bool
	}{{"root", r.Root, false}, {"release", r.Release, false}, {"operator", r.Operator, true}} {
		field := "signed." + role.name
		n := len(role.r.Keys)
		if n == 0 {
			if role.optional && role.r.Threshold == 0 {
				continue
			}
			return bad(field+".keys", "missing or empty")
		}
		if n > MaxRoleKeys {
			return bad(field+".keys", "%d keys, at most %d", n, MaxRoleKeys)
		}
		if role.r.Threshold < 1 || role.r.Threshold > n {
			return bad(field+".threshold", "want 1 to %d (the number of keys), got %d", n, role.r.Threshold)
		}
		for i, k := range role.r.Keys {
			f := fmt.Sprintf("%s.keys[%d]", field, i)
			if prev, ok := owner[k.ID]; ok {
				if prev == role.name {
					return bad(f, "key %s given twice", k.ID)
				}
				return bad(f, "key %s is also a %s key: roles are kept apart", k.ID, prev)
			}
			owner[k.ID] = role.name
		}
	}
	return nil
}

func (r *Root) wire() (*wireSigned, error) {
	w := &wireSigned{Type: Type, Version: r.Version}
	var err error
	if w.Root, err = roleToWire(r.Root); err != nil {
		return nil, err
	}
	if w.Release, err = roleToWire(r.Release); err != nil {
		return nil, err
	}
	if len(r.Operator.Keys) > 0 {
		op, err := roleToWire(r.Operator)
		if err != nil {
			return nil, err
		}
		w.Operator = &op
	}
	return w, nil
}

func roleToWire(r Role) (wireRole, error) {
	w := wireRole{Threshold: r.Threshold, Keys: []wireKey{}}
	for _, k := range r.Keys {
		pemb, err := verify.MarshalPublicKeyPEM(k.Public)
		if err != nil {
			return wireRole{}, err
		}
		w.Keys = append(w.Keys, wireKey{KeyID: k.ID, PublicKey: string(pemb)})
	}
	return w, nil
}

// Signed is the canonical encoding of the signed part, the bytes every
// signature is over: encoding/json of the fields in their fixed order, keys
// in the order the document lists them. Parse refuses whatever this
// encoding would not carry (unknown fields, duplicates), so two documents
// with the same Signed() say the same thing.
func (r *Root) Signed() ([]byte, error) {
	w, err := r.wire()
	if err != nil {
		return nil, fmt.Errorf("root version %d: %w", r.Version, err)
	}
	return json.Marshal(w)
}

// Marshal is the whole document, indented for the people who review it
// before they sign.
func (r *Root) Marshal() ([]byte, error) {
	w, err := r.wire()
	if err != nil {
		return nil, fmt.Errorf("root version %d: %w", r.Version, err)
	}
	doc := wireDoc{Signed: w, Signatures: []wireSig{}}
	for _, s := range r.Signatures {
		doc.Signatures = append(doc.Signatures, wireSig{KeyID: s.KeyID, Sig: base64.StdEncoding.EncodeToString(s.Sig)})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Sign adds key's signature over Signed(), replacing an earlier one by the
// same key. Any key may sign; only those of the roles the chain rule names
// count.
func (r *Root) Sign(key crypto.Signer) (string, error) {
	msg, err := r.Signed()
	if err != nil {
		return "", err
	}
	sig, err := verify.SignManifest(msg, key)
	if err != nil {
		return "", fmt.Errorf("sign root version %d: %w", r.Version, err)
	}
	out := r.Signatures[:0:0]
	for _, s := range r.Signatures {
		if s.KeyID != sig.KeyID {
			out = append(out, s)
		}
	}
	r.Signatures = append(out, sig)
	return sig.KeyID, nil
}

func isKeyID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
