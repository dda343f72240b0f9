package devicetest

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/payload"
	"github.com/otad/otad/sim/device"

	"github.com/otad/otad/ota"
)

const SlotSize = 4 << 20

// Testbed is a file-backed Device: two slot files, a sim bootloader, a state
// directory, a trust directory, and an HTTP server for images.
// Testbed is one simulated device and its image server.
type Testbed struct {
	T        *testing.T
	Dir      string
	Cfg      *config.Config
	Key      crypto.Signer // the release key the device trusts
	signer   *signer.Signer
	Srv      *httptest.Server
	Fetched  atomic.Int64 // payload bytes served (bodies as sent)
	Throttle atomic.Bool  // serve slowly, so a test can interrupt mid-write
	// HoldAt, when positive, stops the server once Fetched reaches it:
	// requests wait, sending nothing, until it is raised or cleared, or they
	// end. A test interrupts a device there, mid-download.
	HoldAt  atomic.Int64
	Factory []byte // what slot A holds at first
	// Clock, when set, is the clock of the agents Start runs and of their
	// offer checks.
	Clock agent.Clock
	// BeforeWrite is the devices' node.Options.BeforeWrite.
	BeforeWrite func()
	images      map[string][]byte
	hits        map[string]int // requests per image name
	mu          sync.Mutex
}

// Options shape the device's config.
type Options struct {
	Policy string // reboot policy; default "immediate"
	Broker string // MQTT broker URL; empty: no [mqtt]
	Groups []string
	Health []string // [commit] health_command
	Window string   // [commit] window; default 10s
	// SlotSize is the size of each slot; default SlotSize.
	SlotSize int
}

// ImageSize is the size of the images Offer makes.
const ImageSize = 3<<20 + 12345

// New makes a file-backed device in a temporary directory.
func New(t *testing.T, opt Options) *Testbed {
	t.Helper()
	if opt.Window == "" {
		opt.Window = "10s"
	}
	window, err := time.ParseDuration(opt.Window)
	Must(t, err)
	dir := t.TempDir()
	tb := &Testbed{T: t, Dir: dir, images: map[string][]byte{}}
	if opt.SlotSize == 0 {
		opt.SlotSize = SlotSize
	}
	tb.Factory = RandBytes(1, opt.SlotSize)
	rel, err := signer.New()
	Must(t, err)
	tb.signer, tb.Key = rel, rel.Key
	tb.Srv = httptest.NewServer(http.HandlerFunc(tb.serve))
	t.Cleanup(tb.Srv.Close)
	spec := device.Spec{
		ID: "gw-0001", Dir: dir, Compatible: "acme,gw-v2", SlotSize: int64(opt.SlotSize), Factory: bytes.NewReader(tb.Factory),
		TrustedKey: rel.PublicKeyPEM, Broker: opt.Broker, Groups: opt.Groups, RebootPolicy: opt.Policy, CommitWindow: window,
		Download: config.Download{Retries: 2, Backoff: config.Duration{Duration: 10 * time.Millisecond}, MaxBackoff: config.Duration{Duration: 50 * time.Millisecond}},
	}
	if opt.Health != nil {
		spec.HealthCommand = func(device.Paths) []string { return opt.Health }
	}
	_, tb.Cfg, err = device.Layout(spec) // otad.toml too, for tests that run the otad binary
	Must(t, err)
	return tb
}

func Must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func RandBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(b)
	return b
}

func (tb *Testbed) serve(w http.ResponseWriter, r *http.Request) {
	tb.mu.Lock()
	name := strings.TrimPrefix(r.URL.Path, "/")
	img, ok := tb.images[name]
	if tb.hits == nil {
		tb.hits = map[string]int{}
	}
	tb.hits[name]++
	tb.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	if !tb.Throttle.Load() {
		http.ServeContent(countingWriter{w, tb, r}, r, "img", time.Time{}, bytes.NewReader(img))
		return
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(img)))
	for off := 0; off < len(img); off += 64 << 10 {
		n, err := w.Write(img[off:min(off+64<<10, len(img))])
		tb.Fetched.Add(int64(n))
		if err != nil {
			return
		}
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
	}
}

// countingWriter counts the bytes of the body sent in Fetched, and holds
// them at HoldAt.
type countingWriter struct {
	http.ResponseWriter
	tb *Testbed
	r  *http.Request
}

func (w countingWriter) Write(b []byte) (int, error) {
	sent := 0
	for len(b) > 0 {
		part := b
		if hold := w.tb.HoldAt.Load(); hold > 0 {
			part = b[:max(0, min(int64(len(b)), hold-w.tb.Fetched.Load()))]
		}
		if len(part) == 0 {
			select {
			case <-w.r.Context().Done():
				return sent, w.r.Context().Err()
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		n, err := w.ResponseWriter.Write(part)
		w.tb.Fetched.Add(int64(n))
		sent += n
		if err != nil {
			return sent, err
		}
		b = b[n:]
	}
	return sent, nil
}

// Size is the size of what the server holds under name (an image, or a
// chunked payload's name.idx and name.store).
func (tb *Testbed) Size(name string) int64 {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return int64(len(tb.images[name]))
}

// Hits is how many requests the image name was asked for.
func (tb *Testbed) Hits(name string) int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.hits[name]
}

type OfferOpts struct {
	Issued  time.Time
	SecVer  uint64
	Tamper  bool // serve other bytes than the manifest describes
	Compat  string
	Device  string
	Expires time.Duration
	Size    int64 // manifest size override
	URL     string
	// Image replaces the seed's random image.
	Image []byte
	// Chunked serves a chunked payload (docs/contract/chunked.md) at URL.idx and URL.store,
	// in chunks of ChunkSize (0: 64 KiB); Tamper then alters one stored chunk.
	Chunked   bool
	ChunkSize int64
	// Signer signs the offer instead of the Testbed's release key.
	Signer *signer.Signer
}

// offer publishes an image on the server and returns a signed envelope for it.
func (tb *Testbed) Offer(name string, seed uint64, o OfferOpts) ([]byte, string) {
	tb.T.Helper()
	img := o.Image
	if img == nil {
		img = RandBytes(seed, ImageSize)
	}
	sum := sha256.Sum256(img)
	var chunks *ota.Chunks
	if o.Chunked {
		chunks = tb.serveChunked(name, img, o)
	} else {
		served := img
		if o.Tamper {
			served = bytes.Clone(img)
			served[len(served)/2] ^= 0xff
		}
		tb.mu.Lock()
		tb.images[name] = served
		tb.mu.Unlock()
	}
	if o.Compat == "" {
		o.Compat = "acme,gw-v2"
	}
	if o.Size == 0 {
		o.Size = int64(len(img))
	}
	if o.URL == "" {
		o.URL = tb.Srv.URL + "/" + name
	}
	var devices []string
	if o.Device != "" {
		devices = []string{o.Device}
	}
	s := tb.signer
	if o.Signer != nil {
		s = o.Signer
	}
	env, err := s.Sign(signer.Offer{ID: "rel-" + name, Version: name, SecurityVersion: o.SecVer, Compatible: o.Compat,
		Devices: devices, URL: o.URL, Size: o.Size, SHA256: hex.EncodeToString(sum[:]), Issued: o.Issued, Expires: o.Expires, Chunks: chunks})
	Must(tb.T, err)
	return env, hex.EncodeToString(sum[:])
}

// serveChunked serves img as a chunked payload at name.idx and name.store
// and returns the manifest's chunks for it.
func (tb *Testbed) serveChunked(name string, img []byte, o OfferOpts) *ota.Chunks {
	var store bytes.Buffer
	res, err := payload.Build(tb.T.Context(), bytes.NewReader(img), &store, payload.Options{ChunkSize: o.ChunkSize, Level: 1})
	Must(tb.T, err)
	served := store.Bytes()
	if o.Tamper {
		served[len(served)/2] ^= 0xff
	}
	tb.mu.Lock()
	tb.images[name+".idx"], tb.images[name+".store"] = res.Index, served
	tb.mu.Unlock()
	url := o.URL
	if url == "" {
		url = tb.Srv.URL + "/" + name
	}
	return res.Chunks(url)
}
