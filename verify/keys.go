package verify

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/otad/otad/ota"
)

const (
	minRSABits     = 2048
	maxKeyFileSize = 64 << 10 // a PEM public key is a few KiB at most
)

// Key is one trusted public key. ID is the hex SHA-256 of its PKIX DER encoding;
// Path is the file it came from, if any.
type Key struct {
	ID     string
	Path   string
	Public crypto.PublicKey
}

// Keyring is a set of trusted keys, distinct by ID. It is immutable and safe for
// concurrent use; reloading the trust directory builds a new one.
type Keyring struct {
	keys      []Key
	verifiers map[string]signature.Verifier
}

// NewKeyring builds a keyring from keys. IDs are computed when empty. Keys of a type
// that can never verify an offer (RSA < 2048 bits, ECDSA other than P-256, unknown
// types) are left out; LoadKeyDir reports such keys by file. A key given twice counts once.
func NewKeyring(keys ...Key) *Keyring {
	kr := &Keyring{verifiers: make(map[string]signature.Verifier, len(keys))}
	for _, k := range keys {
		_, _ = kr.add(k)
	}
	return kr
}

// add validates k and adds it; it reports whether k was new.
func (kr *Keyring) add(k Key) (bool, error) {
	if err := checkPublicKey(k.Public); err != nil {
		return false, err
	}
	id, err := KeyID(k.Public)
	if err != nil {
		return false, err
	}
	if _, dup := kr.verifiers[id]; dup {
		return false, nil
	}
	v, err := signature.LoadVerifier(k.Public, crypto.SHA256)
	if err != nil {
		return false, fmt.Errorf("load verifier: %w", err)
	}
	k.ID = id
	kr.keys = append(kr.keys, k)
	kr.verifiers[id] = v
	return true, nil
}

// KeyID returns the hex SHA-256 of the PKIX DER encoding of pub (docs/contract/formats.md keyid).
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := cryptoutils.MarshalPublicKeyToDER(pub)
	if err != nil {
		return "", fmt.Errorf("key id: %w", err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// checkPublicKey accepts exactly the key types of docs/contract/formats.md.
func checkPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k == nil || k.Curve != elliptic.P256() {
			return fmt.Errorf("unsupported ECDSA curve %s (want P-256)", curveName(k))
		}
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("bad Ed25519 key length %d", len(k))
		}
	case *rsa.PublicKey:
		if k == nil || k.N == nil || k.N.BitLen() < minRSABits {
			bits := 0
			if k != nil && k.N != nil {
				bits = k.N.BitLen()
			}
			return fmt.Errorf("RSA key of %d bits is too small (want at least %d)", bits, minRSABits)
		}
	default:
		return fmt.Errorf("unsupported key type %T (want ECDSA P-256, Ed25519 or RSA)", pub)
	}
	return nil
}

func curveName(k *ecdsa.PublicKey) string {
	if k == nil || k.Curve == nil {
		return "<none>"
	}
	return k.Curve.Params().Name
}

// LoadKeyFile reads one PEM public key (PKIX, "PUBLIC KEY"; a cosign.pub works as is).
// The error names the file.
func LoadKeyFile(path string) (Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return Key{}, fmt.Errorf("public key %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	if err != nil {
		return Key{}, fmt.Errorf("public key %s: %w", path, err)
	}
	if len(b) > maxKeyFileSize {
		return Key{}, fmt.Errorf("public key %s: larger than %d bytes", path, maxKeyFileSize)
	}
	k, err := parsePublicKeyPEM(b)
	if err != nil {
		return Key{}, fmt.Errorf("public key %s: %w", path, err)
	}
	k.Path = path
	return k, nil
}

func parsePublicKeyPEM(b []byte) (Key, error) {
	block, rest := pem.Decode(b)
	if block == nil {
		return Key{}, errors.New("no PEM block found")
	}
	if block.Type != string(cryptoutils.PublicKeyPEMType) {
		return Key{}, fmt.Errorf("PEM type %q, want %q", block.Type, cryptoutils.PublicKeyPEMType)
	}
	// One key per file: a second block would be silently ignored otherwise.
	if next, _ := pem.Decode(rest); next != nil {
		return Key{}, errors.New("more than one PEM block (one key per file)")
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pem.EncodeToMemory(block))
	if err != nil {
		return Key{}, err
	}
	if err := checkPublicKey(pub); err != nil {
		return Key{}, err
	}
	id, err := KeyID(pub)
	if err != nil {
		return Key{}, err
	}
	return Key{ID: id, Public: pub}, nil
}

// LoadKeyDir reads every regular file in dir as one PEM public key (PKIX, "PUBLIC KEY";
// cosign.pub works as is). Symlinks are followed; dot files are skipped, since editors
// and config tools leave temporary files there. A bad file does not stop the others: it
// is returned in bad, each error naming the file. err is only for an unreadable directory.
func LoadKeyDir(dir string) (kr *Keyring, bad []error, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("trust directory %s: %w", dir, err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	kr = NewKeyring()
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		st, err := os.Stat(path)
		if err != nil {
			bad = append(bad, fmt.Errorf("public key %s: %w", path, err))
			continue
		}
		if !st.Mode().IsRegular() {
			continue
		}
		k, err := LoadKeyFile(path)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		if _, err := kr.add(k); err != nil {
			bad = append(bad, fmt.Errorf("public key %s: %w", path, err))
		}
	}
	return kr, bad, nil
}

// Len is the number of distinct trusted keys.
func (k *Keyring) Len() int {
	if k == nil {
		return 0
	}
	return len(k.keys)
}

// Keys returns a copy of the trusted keys, in the order they were added.
func (k *Keyring) Keys() []Key {
	if k == nil {
		return nil
	}
	return append([]Key(nil), k.keys...)
}

// VerifyThreshold runs check 3 of docs/contract/checks.md: at least threshold distinct trusted keys
// must each verify one of sigs over the raw manifest bytes. A signature with a keyid is
// checked only against that key; one without is tried against every trusted key.
// threshold < 1 means 1. The refusal is a *ota.Error with code bad_signature.
func (k *Keyring) VerifyThreshold(manifest []byte, sigs []Signature, threshold int) error {
	if threshold < 1 {
		threshold = 1
	}
	if k.Len() == 0 {
		return refuse(ota.CodeBadSignature, "signatures", "no trusted keys")
	}
	verified := make(map[string]bool, threshold)
	try := func(id string, sig []byte) {
		if verified[id] {
			return
		}
		if k.verifiers[id].VerifySignature(bytes.NewReader(sig), bytes.NewReader(manifest)) == nil {
			verified[id] = true
		}
	}
	for _, s := range sigs {
		if s.KeyID != "" {
			// An unknown keyid is some other party's signature: it just does not count.
			if _, ok := k.verifiers[strings.ToLower(s.KeyID)]; ok {
				try(strings.ToLower(s.KeyID), s.Sig)
			}
		} else {
			for _, key := range k.keys {
				try(key.ID, s.Sig)
				if len(verified) >= threshold {
					break
				}
			}
		}
		if len(verified) >= threshold {
			return nil
		}
	}
	return refuse(ota.CodeBadSignature, "signatures",
		fmt.Sprintf("%d of %d required trusted signatures verified (%d signatures, %d trusted keys)",
			len(verified), threshold, len(sigs), k.Len()))
}

// ParsePublicKeyPEM reads one PEM public key from memory, with the checks of
// LoadKeyFile; the key's ID is set.
func ParsePublicKeyPEM(b []byte) (Key, error) { return parsePublicKeyPEM(b) }
