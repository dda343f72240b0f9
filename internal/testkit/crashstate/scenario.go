package crashstate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/payload"
)

// Mode is how the image is delivered.
type Mode int

const (
	Stream  Mode = iota // one payload, streamed into the slot
	Chunked             // a chunked payload (docs/contract/chunked.md)
)

func (m Mode) String() string { return [...]string{"stream", "chunked"}[m] }

// End is how the update is meant to end.
type End int

const (
	Commit   End = iota // the new image passes its health check
	Rollback            // it fails it: back to the old one
	// Cancel: otad cancel stops the download once, then otad install of
	// the same offer installs it, and it is committed.
	Cancel
	// MarkActive: under the manual reboot policy, otad mark-active booted
	// drops the staged install once, then otad install of the same offer
	// stages it again, the operator reboots, and it is committed.
	MarkActive
	// Rotate: the offer brings a new root of trust, which the device keeps
	// before it takes the offer, then commits it (RootScenarios).
	Rotate
)

func (e End) String() string {
	return [...]string{"commit", "rollback", "cancel", "mark-active", "root"}[e]
}

// UndoScenarios are every mode on every bootloader with an operator's
// cancel and mark-active booted on the way (issue 27).
func UndoScenarios(modes ...Mode) []Scenario {
	var out []Scenario
	for _, m := range modes {
		for _, b := range Boots() {
			for _, e := range []End{Cancel, MarkActive} {
				out = append(out, Scenario{Mode: m, Boot: b, End: e})
			}
		}
	}
	return out
}

// Scenario is one whole update explored.
type Scenario struct {
	Mode Mode
	Boot Boot
	End  End
}

func (s Scenario) String() string { return fmt.Sprintf("%s/%s/%s", s.Mode, s.Boot, s.End) }

// Modes are the modes explored.
func Modes() []Mode { return []Mode{Stream, Chunked} }

// Scenarios are every mode on every bootloader, to a commit and to a rollback.
func Scenarios(modes ...Mode) []Scenario {
	var out []Scenario
	for _, m := range modes {
		for _, b := range Boots() {
			for _, e := range []End{Commit, Rollback} {
				out = append(out, Scenario{Mode: m, Boot: b, End: e})
			}
		}
	}
	return out
}

// Sizes of the fixture: small images, so that a state costs little.
const (
	SlotSize  = 192 << 10
	ImageSize = 160<<10 + 77
	chunkSize = 16 << 10
)

// Fixture is what every scenario shares: the release key, the old image
// (slot A's at the factory) and the new one, and the server that serves it.
type Fixture struct {
	Signer *signer.Signer
	// Epoch is when the device first powers on, by its clock.
	Epoch    time.Time
	Old, New []byte
	OldSHA   string
	NewSHA   string
	srv      *httptest.Server
	files    map[string][]byte
	offers   map[Mode][]byte
	root     *rootFixture
}

// NewFixture makes the images (the new one shares most of its chunks with
// the old), signs an offer of each mode and starts the image server.
func NewFixture() (*Fixture, error) {
	s, err := signer.New()
	if err != nil {
		return nil, err
	}
	r := rand.NewChaCha8([32]byte{21})
	old := make([]byte, ImageSize)
	r.Read(old)
	img := bytes.Clone(old)
	for off := 0; off < len(img); off += 5 * chunkSize {
		r.Read(img[off : off+min(chunkSize, len(img)-off)])
	}
	f := &Fixture{Signer: s, Epoch: time.Now().UTC(), Old: old, New: img, OldSHA: digest(old), NewSHA: digest(img),
		files: map[string][]byte{"/new.img": img}, offers: map[Mode][]byte{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	var store bytes.Buffer
	res, err := payload.Build(context.Background(), bytes.NewReader(img), &store, payload.Options{ChunkSize: chunkSize, Level: 1})
	if err != nil {
		f.Close()
		return nil, err
	}
	f.files["/new.idx"], f.files["/new.store"] = res.Index, store.Bytes()
	for _, m := range []Mode{Stream, Chunked} {
		o := signer.Offer{ID: "rel-2", Version: "2", SecurityVersion: 2, Compatible: "acme,crash", URL: f.srv.URL + "/new.img",
			Size: int64(len(img)), SHA256: f.NewSHA, Issued: time.Now().Add(-time.Minute), Expires: 30 * 24 * time.Hour}
		if m == Chunked {
			o.Chunks = res.Chunks(f.srv.URL + "/new")
		}
		if f.offers[m], err = s.Sign(o); err != nil {
			f.Close()
			return nil, err
		}
	}
	o := signer.Offer{ID: "rel-2", Version: "2", SecurityVersion: 2, Compatible: "acme,crash", URL: f.srv.URL + "/new.img",
		Size: int64(len(img)), SHA256: f.NewSHA, Issued: time.Now().Add(-time.Minute), Expires: 30 * 24 * time.Hour}
	if f.root, err = newRootFixture(s, o); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (f *Fixture) serve(w http.ResponseWriter, r *http.Request) {
	b, ok := f.files[r.URL.Path]
	if !ok || !strings.HasPrefix(r.URL.Path, "/new") {
		http.NotFound(w, r)
		return
	}
	http.ServeContent(w, r, "img", time.Time{}, bytes.NewReader(b))
}

// Close stops the server.
func (f *Fixture) Close() { f.srv.Close() }

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
