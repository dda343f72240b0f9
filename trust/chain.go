package trust

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// MaxChain is the most rotations a device walks at once
// (docs/contract/trust.md): a longer chain is refused whole. Roots change
// rarely; the bound keeps a hostile chain from costing more than a few
// hundred signature checks.
const MaxChain = 32

// signedBy checks that threshold keys of role signed r.
func (r *Root) signedBy(role Role, whose string) error {
	msg, err := r.Signed()
	if err != nil {
		return ota.Wrap(ota.CodeBadRoot, err)
	}
	if err := role.Keyring().VerifyThreshold(msg, r.Signatures, role.Threshold); err != nil {
		return ota.FieldErrorf(ota.CodeRootSignature, "signatures", "root version %d: %s: %w", r.Version, whose, unwrapped(err))
	}
	return nil
}

// unwrapped is the cause of a verify refusal, without its bad_signature
// code: the refusal here is root_signature.
func unwrapped(err error) error {
	if e, ok := err.(*ota.Error); ok && e.Err != nil {
		return e.Err
	}
	return err
}

// Anchor checks a root that is trusted as it is (the one an image ships,
// or the one a device kept): signed by a threshold of its own root keys.
func Anchor(r *Root) error {
	return r.signedBy(r.Root, "its own root keys")
}

// Next checks the chain rule for one step: next is trusted's version + 1
// and is signed by a threshold of trusted's root keys and a threshold of
// its own.
func Next(trusted, next *Root) error {
	if next.Version != trusted.Version+1 {
		return ota.FieldErrorf(ota.CodeRootVersion, "signed.version",
			"%d does not follow the trusted root's version %d (want %d)", next.Version, trusted.Version, trusted.Version+1)
	}
	if err := next.signedBy(trusted.Root, fmt.Sprintf("root keys of version %d", trusted.Version)); err != nil {
		return err
	}
	return next.signedBy(next.Root, "its own root keys")
}

// Walk takes trusted along chain and returns the newest root reached.
// Roots of chain at or below trusted's version are history the device has
// and are passed over; what is left must be trusted+1, trusted+2, … in
// order, at most MaxChain of them, each passing Next. Any refusal refuses
// the whole chain and the trusted root stays: a chain with nothing newer
// is refused with root_version.
func Walk(trusted *Root, chain []*Root) (*Root, error) {
	var steps []*Root
	for _, r := range chain {
		if r.Version > trusted.Version {
			steps = append(steps, r)
		}
	}
	if len(steps) == 0 {
		vs := make([]string, len(chain))
		for i, r := range chain {
			vs[i] = fmt.Sprint(r.Version)
		}
		return trusted, ota.FieldErrorf(ota.CodeRootVersion, "signed.version",
			"version %s is not newer than the trusted root's version %d", strings.Join(vs, ", "), trusted.Version)
	}
	if len(steps) > MaxChain {
		return trusted, ota.Errorf(ota.CodeRootChainLimit, "%d rotations at once, a device walks at most %d", len(steps), MaxChain)
	}
	cur := trusted
	for _, r := range steps {
		if err := Next(cur, r); err != nil {
			return trusted, err
		}
		cur = r
	}
	return cur, nil
}

// Revoked are the release keys of old that new no longer holds.
func Revoked(old, new *Root) []verify.Key {
	var out []verify.Key
	for _, k := range old.Release.Keys {
		if !new.Release.Has(k.ID) {
			out = append(out, k)
		}
	}
	return out
}

// SameSigned says whether a and b sign the same content.
func SameSigned(a, b *Root) bool {
	x, err1 := a.Signed()
	y, err2 := b.Signed()
	return err1 == nil && err2 == nil && slices.Equal(x, y)
}

// MaxChainSize bounds a chain read at once (an MQTT message, a file).
const MaxChainSize = 1 << 20

// ParseChain reads one root document, or a JSON array of them (a chain,
// oldest first), each with Parse's rules; the refusal names the element.
func ParseChain(b []byte) ([]*Root, error) {
	if len(b) > MaxChainSize {
		return nil, bad("", "%d bytes, over the limit of %d", len(b), MaxChainSize)
	}
	trimmed := strings.TrimLeft(string(b), " \t\r\n")
	if !strings.HasPrefix(trimmed, "[") {
		r, err := Parse(b)
		if err != nil {
			return nil, err
		}
		return []*Root{r}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		return nil, bad("", "not a chain of root documents: %v", err)
	}
	if len(raws) == 0 {
		return nil, bad("", "an empty chain")
	}
	if len(raws) > 2*MaxChain {
		return nil, ota.Errorf(ota.CodeRootChainLimit, "%d roots in one chain, at most %d", len(raws), 2*MaxChain)
	}
	out := make([]*Root, 0, len(raws))
	for i, raw := range raws {
		r, err := Parse(raw)
		if err != nil {
			if e, ok := err.(*ota.Error); ok {
				e.Field = strings.TrimSuffix(fmt.Sprintf("[%d].%s", i, e.Field), ".")
			}
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
