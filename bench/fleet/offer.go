package main

import (
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/otad/otad/internal/demo"
	"github.com/otad/otad/verify"

	"github.com/otad/otad/ota"
)

// compatible is the bench devices' compatible string; every offer names it.
const compatible = "otad,fleetbench-sim"

// signer makes signed offers for images in the served directory.
type signer struct {
	key    crypto.Signer
	pubPEM []byte // what the devices trust
	www    string // the image server's directory
	base   string // the image server's URL
}

func newSigner(www, base string) (*signer, error) {
	key, err := verify.GenerateKey("ecdsa-p256")
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	pub, err := verify.MarshalPublicKeyPEM(key.Public())
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	return &signer{key: key, pubPEM: pub, www: www, base: base}, nil
}

// image writes a demo image named name into the served directory and
// returns its SHA-256.
func (s *signer) image(name string, spec demo.ImageSpec) (sum string, err error) {
	path := filepath.Join(s.www, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", name, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("image %s: %w", path, cerr)
		}
	}()
	h := sha256.New()
	if err := demo.WriteImage(io.MultiWriter(f, h), spec); err != nil {
		return "", fmt.Errorf("image %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// offer signs an envelope for the served image name (size bytes, sum).
func (s *signer) offer(id, version, name string, size int64, sum string, issued time.Time) ([]byte, error) {
	m := verify.Manifest{
		Schema: 1, ID: id, Version: version, SecurityVersion: 1, Compatible: []string{compatible},
		IssuedAt: issued.UTC(), ExpiresAt: issued.UTC().Add(24 * time.Hour),
		Payload: verify.Payload{URL: s.base + "/" + name, Compression: ota.CompressionNone, Size: size, SHA256: sum},
	}
	return verify.SignOffer(&m, s.key)
}
