package e2e

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// PayloadServer serves image files over HTTP on the host's loopback; the guest
// fetches them from 10.0.2.2. http.ServeContent answers Range requests, so
// resumed downloads work as against a real server.
type PayloadServer struct {
	Dir  string
	Port int

	// bytesPerSecond throttles responses (0: unthrottled), so a test can cut the
	// power while a slot is being written.
	bytesPerSecond atomic.Int64
	requests       atomic.Int64
	sent           atomic.Int64
	srv            *http.Server
	ln             net.Listener
}

// StartPayloadServer serves dir on a free loopback port until Close.
func StartPayloadServer(dir string) (*PayloadServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &PayloadServer{Dir: dir, Port: ln.Addr().(*net.TCPAddr).Port, ln: ln}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// URL is the payload's address as the guest sees it.
func (s *PayloadServer) URL(name string) string {
	return fmt.Sprintf("http://%s:%d/%s", GuestHostAddr, s.Port, name)
}

// Throttle limits the response rate to bytesPerSecond (0: no limit).
func (s *PayloadServer) Throttle(bytesPerSecond int64) { s.bytesPerSecond.Store(bytesPerSecond) }

// Requests counts the requests served.
func (s *PayloadServer) Requests() int64 { return s.requests.Load() }

// Sent counts the body bytes sent.
func (s *PayloadServer) Sent() int64 { return s.sent.Load() }

// Close stops the server.
func (s *PayloadServer) Close() error { return s.srv.Close() }

func (s *PayloadServer) serve(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	name := filepath.Base(r.URL.Path)
	f, err := os.Open(filepath.Join(s.Dir, name))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	http.ServeContent(&throttled{ResponseWriter: w, rate: &s.bytesPerSecond, sent: &s.sent, ctx: r.Context()}, r, name, st.ModTime(), f)
}

// throttled paces writes in small chunks when a rate is set.
type throttled struct {
	http.ResponseWriter
	rate *atomic.Int64
	sent *atomic.Int64
	ctx  context.Context
}

func (t *throttled) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		rate := t.rate.Load()
		if rate <= 0 {
			n, err := t.ResponseWriter.Write(p)
			t.sent.Add(int64(n))
			return written + n, err
		}
		chunk := min(int64(len(p)), max(rate/10, 1))
		n, err := t.ResponseWriter.Write(p[:chunk])
		t.sent.Add(int64(n))
		written += n
		if err != nil {
			return written, err
		}
		if f, ok := t.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		p = p[chunk:]
		select {
		case <-t.ctx.Done():
			return written, t.ctx.Err()
		case <-time.After(time.Duration(float64(chunk) / float64(rate) * float64(time.Second))):
		}
	}
	return written, nil
}

// Signer makes offers the guest trusts.
type Signer struct {
	Key          crypto.Signer
	PublicKeyPEM []byte
}

// NewSigner generates an ECDSA P-256 test key.
func NewSigner() (*Signer, error) {
	k, err := verify.GenerateKey(verify.KeyECDSAP256)
	if err != nil {
		return nil, err
	}
	pub, err := verify.MarshalPublicKeyPEM(k.Public())
	if err != nil {
		return nil, err
	}
	return &Signer{Key: k, PublicKeyPEM: pub}, nil
}

// Image is a payload file with its size and digest.
type Image struct {
	Path   string
	Size   int64
	SHA256 string
}

// HashImage reads a payload file's size and SHA-256.
func HashImage(path string) (Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return Image{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return Image{}, fmt.Errorf("hash %s: %w", path, err)
	}
	return Image{Path: path, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Offer signs a manifest for img at url; issued orders offers (newest wins).
func (s *Signer) Offer(id, version string, img Image, url string, issued time.Time) ([]byte, error) {
	m := verify.Manifest{
		Schema: 1, ID: id, Version: version, SecurityVersion: 1,
		Compatible: []string{GuestCompatible}, Devices: []string{GuestDeviceID},
		IssuedAt: issued.UTC().Truncate(time.Second), ExpiresAt: issued.UTC().Add(24 * time.Hour).Truncate(time.Second),
		Payload: verify.Payload{URL: url, Compression: ota.CompressionNone, Size: img.Size, SHA256: img.SHA256},
	}
	return verify.SignOffer(&m, s.Key)
}

// Fleet watches the device's status, progress and online topics on the broker.
type Fleet struct {
	cfg mqtt.Config

	mu       sync.Mutex
	status   []ota.Status // every status snapshot, in arrival order
	progress []ota.Progress
	changed  chan struct{}
	watchErr error
}

// WatchFleet subscribes until ctx ends. The first connect must succeed.
func WatchFleet(ctx context.Context, broker string) (*Fleet, error) {
	f := &Fleet{cfg: mqtt.Config{Broker: broker, ConnectTimeout: 5 * time.Second}, changed: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		err := mqtt.Watch(ctx, f.cfg, f.handle)
		f.mu.Lock()
		f.watchErr = err
		f.mu.Unlock()
		select {
		case ready <- err:
		default:
		}
	}()
	// Watch reports only a failed first connect; give it that long.
	select {
	case err := <-ready:
		if err != nil {
			return nil, err
		}
	case <-time.After(2 * time.Second):
	}
	return f, nil
}

func (f *Fleet) handle(m mqtt.Message) {
	topic, payload := m.Topic, m.Payload
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case strings.HasSuffix(topic, "/"+GuestDeviceID+"/status"):
		var st ota.Status
		if json.Unmarshal(payload, &st) == nil {
			f.status = append(f.status, st)
		}
	case strings.HasSuffix(topic, "/"+GuestDeviceID+"/progress"):
		var p ota.Progress
		if json.Unmarshal(payload, &p) == nil {
			f.progress = append(f.progress, p)
		}
	default:
		return
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// Publish puts an offer on the device's desired topic, retained.
func (f *Fleet) Publish(ctx context.Context, envelope []byte) error {
	return mqtt.PublishRetained(ctx, f.cfg, mqtt.Topics{Device: GuestDeviceID}.Desired(), envelope)
}

// ErrNoSuchStatus means the wait ended before a matching status arrived.
var ErrNoSuchStatus = errors.New("no matching status")

// WaitStatus waits for a status snapshot (one already received counts) for
// which ok is true.
func (f *Fleet) WaitStatus(ctx context.Context, ok func(ota.Status) bool) (ota.Status, error) {
	st, err := waitFor(ctx, f, &f.status, ok)
	if err != nil {
		return st, fmt.Errorf("%w: %w", ErrNoSuchStatus, err)
	}
	return st, nil
}

// WaitProgress waits for a progress report with at least bytesDone.
func (f *Fleet) WaitProgress(ctx context.Context, bytesDone int64) (ota.Progress, error) {
	p, err := waitFor(ctx, f, &f.progress, func(p ota.Progress) bool { return p.BytesDone >= bytesDone })
	if err != nil {
		return p, fmt.Errorf("no progress report with %d bytes done: %w", bytesDone, err)
	}
	return p, nil
}

// waitFor waits for a message of those f gathers in *got (one already
// received counts) for which ok is true.
func waitFor[T any](ctx context.Context, f *Fleet, got *[]T, ok func(T) bool) (T, error) {
	seen := 0
	for {
		f.mu.Lock()
		for ; seen < len(*got); seen++ {
			if m := (*got)[seen]; ok(m) {
				f.mu.Unlock()
				return m, nil
			}
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			var none T
			return none, ctx.Err()
		case <-changed:
		}
	}
}

// Statuses returns every status received so far, for failure reports.
func (f *Fleet) Statuses() []ota.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ota.Status(nil), f.status...)
}
