package verify

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// Key kinds GenerateKey understands.
const (
	KeyECDSAP256 = "ecdsa-p256"
	KeyEd25519   = "ed25519"
	KeyRSA3072   = "rsa-3072"
)

// GenerateKey makes a new signing key: "ecdsa-p256" (the default, also for ""),
// "ed25519" or "rsa-3072".
func GenerateKey(kind string) (crypto.Signer, error) {
	switch kind {
	case "", KeyECDSAP256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case KeyEd25519:
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		return priv, err
	case KeyRSA3072:
		return rsa.GenerateKey(rand.Reader, 3072)
	default:
		return nil, fmt.Errorf("unknown key type %q (want %s, %s or %s)", kind, KeyECDSAP256, KeyEd25519, KeyRSA3072)
	}
}

// MarshalPrivateKeyPEM encodes k as PKCS#8 PEM ("PRIVATE KEY").
func MarshalPrivateKeyPEM(k crypto.Signer) ([]byte, error) {
	b, err := cryptoutils.MarshalPrivateKeyToPEM(k)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return b, nil
}

// MarshalPublicKeyPEM encodes pub as PKIX PEM ("PUBLIC KEY"), the form trust directories hold.
func MarshalPublicKeyPEM(pub crypto.PublicKey) ([]byte, error) {
	b, err := cryptoutils.MarshalPublicKeyToPEM(pub)
	if err != nil {
		return nil, fmt.Errorf("marshal public key: %w", err)
	}
	return b, nil
}

// LoadPrivateKeyFile reads a PEM private key: PKCS#8 ("PRIVATE KEY"), SEC 1
// ("EC PRIVATE KEY") or PKCS#1 ("RSA PRIVATE KEY"). Encrypted keys are not supported.
// The error names the file.
func LoadPrivateKeyFile(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("private key %s: %w", path, err)
	}
	if bytes.Contains(b, []byte("ENCRYPTED")) {
		return nil, fmt.Errorf("private key %s: encrypted keys are not supported", path)
	}
	priv, err := cryptoutils.UnmarshalPEMToPrivateKey(b, nil)
	if err != nil {
		return nil, fmt.Errorf("private key %s: %w", path, err)
	}
	s, ok := priv.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key %s: %T cannot sign", path, priv)
	}
	if err := checkPublicKey(s.Public()); err != nil {
		return nil, fmt.Errorf("private key %s: %w", path, err)
	}
	return s, nil
}

// SignManifest signs the raw manifest bytes the way devices verify them: ECDSA as
// ASN.1 DER over SHA-256 (what cosign sign-blob prints), Ed25519 pure, RSA PKCS#1 v1.5
// with SHA-256. The signature carries the key's ID.
func SignManifest(manifest []byte, key crypto.Signer) (Signature, error) {
	if key == nil {
		return Signature{}, errors.New("sign manifest: no key")
	}
	pub := key.Public()
	if err := checkPublicKey(pub); err != nil {
		return Signature{}, fmt.Errorf("sign manifest: %w", err)
	}
	id, err := KeyID(pub)
	if err != nil {
		return Signature{}, fmt.Errorf("sign manifest: %w", err)
	}
	sig, err := signBytes(manifest, key)
	if err != nil {
		return Signature{}, fmt.Errorf("sign manifest with key %s: %w", id, err)
	}
	return Signature{KeyID: id, Sig: sig}, nil
}

func signBytes(msg []byte, key crypto.Signer) ([]byte, error) {
	if s, err := signature.LoadSigner(key, crypto.SHA256); err == nil {
		return s.SignMessage(bytes.NewReader(msg))
	}
	// Opaque signers (hardware tokens, KMS wrappers) are not known to sigstore's loader:
	// drive crypto.Signer directly with the same algorithms.
	if _, ok := key.Public().(ed25519.PublicKey); ok {
		return key.Sign(rand.Reader, msg, crypto.Hash(0))
	}
	sum := sha256.Sum256(msg)
	return key.Sign(rand.Reader, sum[:], crypto.SHA256)
}

// SignOffer marshals m, signs the bytes with each key and returns the
// offer envelope: what a release tool (or a test) publishes.
func SignOffer(m *Manifest, keys ...crypto.Signer) ([]byte, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("offer %s: marshal manifest: %w", m.ID, err)
	}
	sigs := make([]Signature, 0, len(keys))
	for _, k := range keys {
		sig, err := SignManifest(raw, k)
		if err != nil {
			return nil, fmt.Errorf("offer %s: %w", m.ID, err)
		}
		sigs = append(sigs, sig)
	}
	return MarshalEnvelope(raw, sigs...)
}
