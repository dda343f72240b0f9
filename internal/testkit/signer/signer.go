// Package signer is a throwaway release key and the offers it signs, for
// simulated devices in tests and benchmarks: the devices trust
// PublicKeyPEM, and Sign makes a schema-1 offer of a whole image, or a
// schema-2 offer of a chunked one.
package signer

import (
	"crypto"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// Signer is a fresh ECDSA P-256 key.
type Signer struct {
	Key          crypto.Signer
	PublicKeyPEM []byte // what the devices trust
}

// New makes a key.
func New() (*Signer, error) {
	k, err := verify.GenerateKey(verify.KeyECDSAP256)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	pub, err := verify.MarshalPublicKeyPEM(k.Public())
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	return &Signer{Key: k, PublicKeyPEM: pub}, nil
}

// Trusted is a fresh key for a test and a directory holding its public key
// as release.pub: the trust.keys_dir of devices that trust it.
func Trusted(t testing.TB) (s *Signer, keysDir string) {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	keysDir = t.TempDir()
	if err := os.WriteFile(filepath.Join(keysDir, "release.pub"), s.PublicKeyPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return s, keysDir
}

// Offer is what a signed offer says of an image.
type Offer struct {
	ID, Version     string
	SecurityVersion uint64
	Compatible      string
	Devices         []string
	URL             string
	Size            int64
	SHA256          string
	// Compression of the stream payload at URL; "" is none.
	Compression ota.Compression
	Issued      time.Time     // zero: a minute ago
	Expires     time.Duration // after Issued; zero: a day
	// Chunks, when set, makes it a chunked payload (schema 2); URL is unused.
	Chunks *ota.Chunks
}

// Sign makes the envelope of o.
func (s *Signer) Sign(o Offer) ([]byte, error) {
	if o.Issued.IsZero() {
		o.Issued = time.Now().Add(-time.Minute)
	}
	if o.Expires == 0 {
		o.Expires = 24 * time.Hour
	}
	m := verify.Manifest{
		Schema: 1, ID: o.ID, Version: o.Version, SecurityVersion: o.SecurityVersion,
		Compatible: []string{o.Compatible}, Devices: o.Devices,
		IssuedAt: o.Issued.UTC(), ExpiresAt: o.Issued.UTC().Add(o.Expires),
		Payload: verify.Payload{URL: o.URL, Compression: o.Compression, Size: o.Size, SHA256: o.SHA256},
	}
	if o.Compression == "" {
		m.Payload.Compression = ota.CompressionNone
	}
	if o.Chunks != nil {
		m.Schema, m.Payload = 2, verify.Payload{Size: o.Size, SHA256: o.SHA256, Chunks: o.Chunks}
	}
	return verify.SignOffer(&m, s.Key)
}
