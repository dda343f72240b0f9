package main

import (
	"path/filepath"
	"time"

	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/sim/demo"
)

// compatible is the bench devices' compatible string; every offer names it.
const compatible = "otad,fleetbench-sim"

// releases makes demo images in the served directory and signed offers of
// them.
type releases struct {
	*signer.Signer
	www  string // the image server's directory
	base string // the image server's URL
}

func newReleases(www, base string) (*releases, error) {
	s, err := signer.New()
	if err != nil {
		return nil, err
	}
	return &releases{Signer: s, www: www, base: base}, nil
}

// image writes a demo image named name into the served directory and
// returns its SHA-256.
func (r *releases) image(name string, spec demo.ImageSpec) (sum string, err error) {
	return demo.WriteImageFile(filepath.Join(r.www, name), spec)
}

// offer signs an envelope for the served image name (size bytes, sum).
func (r *releases) offer(id, version, name string, size int64, sum string, issued time.Time) ([]byte, error) {
	return r.Sign(signer.Offer{ID: id, Version: version, SecurityVersion: 1, Compatible: compatible,
		URL: r.base + "/" + name, Size: size, SHA256: sum, Issued: issued})
}
