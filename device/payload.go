package device

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/otad/otad/device/control"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/verify"
)

// givenPayload is where `otad install --payload LOCATION` reads an offer's
// payload: LOCATION itself for a stream payload, LOCATION.idx and
// LOCATION.store for a chunked one (as otactl sign --out-payload writes
// them); a URL (scheme://…) or a local file. Only the place is the person's:
// the signed size, hashes and index still bind the bytes.
type givenPayload struct {
	location string
	chunked  bool
	urls     []string   // URLs: the stream, or the index and the store
	paths    []string   // local files instead, absolute
	names    []string   // the local files as the person gave them: errors name these (docs/contract/commands.md)
	files    []*os.File // the local files, open (passed to the daemon)
}

// payloadFor resolves location for the envelope raw. The manifest is read
// unverified, only to know which files to take: the agent checks the offer
// before anything is read from them.
func payloadFor(location string, raw []byte) (*givenPayload, error) {
	g := &givenPayload{location: location}
	if env, err := verify.ParseEnvelope(raw); err == nil {
		if m, err := verify.ParseManifest(env.Manifest); err == nil {
			g.chunked = m.Payload.Chunks != nil
		}
	}
	names := []string{location}
	if g.chunked {
		names = []string{location + ".idx", location + ".store"}
	}
	if strings.Contains(location, "://") {
		g.urls = names
		return g, nil
	}
	for _, n := range names {
		abs, err := filepath.Abs(n)
		if err != nil {
			return nil, err
		}
		f, err := os.Open(abs)
		if err != nil {
			g.close()
			return nil, fmt.Errorf("--payload: %w", err)
		}
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			f.Close()
			g.close()
			return nil, fmt.Errorf("--payload: %s is not a regular file", abs)
		}
		g.paths, g.names, g.files = append(g.paths, abs), append(g.names, n), append(g.files, f)
	}
	return g, nil
}

func (g *givenPayload) close() {
	for _, f := range g.files {
		f.Close()
	}
}

// roles are the files' places in the payload, in order.
func (g *givenPayload) roles() []string {
	if g.chunked {
		return []string{"index", "store"}
	}
	return []string{"stream"}
}

// control is the payload for the daemon: URLs, or the open files passed.
func (g *givenPayload) control() (control.Payload, []*os.File) {
	if g.files == nil {
		if g.chunked {
			return control.Payload{IndexURL: g.urls[0], StoreURL: g.urls[1]}, nil
		}
		return control.Payload{URL: g.urls[0]}, nil
	}
	return control.Payload{Passed: g.roles(), Paths: g.names}, g.files
}

// source is the payload for an agent in this process: file URLs of the
// paths (same namespace), or the URLs.
func (g *givenPayload) source() node.Source {
	urls := g.urls
	var names map[string]string
	if g.paths != nil {
		urls, names = nil, map[string]string{}
		for i, p := range g.paths {
			u := node.FileURL(p)
			urls, names[u] = append(urls, u), g.names[i]
		}
	}
	if g.chunked {
		return node.Source{IndexURL: urls[0], StoreURL: urls[1], Names: names}
	}
	return node.Source{URL: urls[0], Names: names}
}
