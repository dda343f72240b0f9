package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/ota"
)

// Handler is what the daemon serves.
type Handler interface {
	// InstallFrom waits for the outcome of an offer; source names it in the log.
	InstallFrom(ctx context.Context, source string, raw []byte) (ota.Outcome, error)
	Status() ota.Status
	MarkGood(ctx context.Context) error
	MarkBad(ctx context.Context) error
	// Cancel stops the running install (otad cancel).
	Cancel(ctx context.Context) error
	// MarkActive is otad mark-active booted (other false) or other.
	MarkActive(ctx context.Context, other bool) error
}

// MaxRequest bounds a request: an envelope is at most 256 KiB (base64 grows it).
const MaxRequest = 512 << 10

type request struct {
	Op string `json:"op"`
	// Slot is mark-active's: "booted" or "other".
	Slot     string   `json:"slot,omitempty"`
	Envelope []byte   `json:"envelope,omitempty"`
	Payload  *Payload `json:"payload,omitempty"`
	Roots    [][]byte `json:"roots,omitempty"` // trust-update: root documents or chains
}

type response struct {
	Outcome *ota.Outcome `json:"outcome,omitempty"`
	Status  *ota.Status  `json:"status,omitempty"`
	Trust   *TrustUpdate `json:"trust,omitempty"`
	Error   string       `json:"error,omitempty"`
	Code    ota.Code     `json:"code,omitempty"` // the error's code, when it has one
}

// TrustUpdate is what a root update did: the trusted root's version before
// and after.
type TrustUpdate struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// TrustHandler is what a daemon with a root of trust also serves
// (otad trust update, docs/contract/trust.md).
type TrustHandler interface {
	UpdateRoot(ctx context.Context, docs [][]byte) (from, to uint64, err error)
}

// Server serves Handler on a unix socket.
type Server struct {
	ln     net.Listener
	h      Handler
	log    *slog.Logger
	active sync.WaitGroup
}

// Listen creates the socket (mode 0600 in a 0700 directory), replacing a
// stale one left by a crashed daemon. The caller holds the state lock, so no
// other daemon can be serving it.
func Listen(path string, h Handler, log *slog.Logger) (*Server, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	_ = os.Remove(path)
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	return &Server{ln: ln, h: h, log: log}, nil
}

// Serve accepts connections until ctx ends.
func (s *Server) Serve(ctx context.Context) {
	go func() {
		<-ctx.Done()
		s.ln.Close()
	}()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.active.Add(1)
		go func() {
			defer s.active.Done()
			s.handle(ctx, c.(*net.UnixConn))
		}()
	}
}

// Close stops listening, removes the socket, and gives the answers in
// flight (an install outcome just before a reboot) a moment to go out.
func (s *Server) Close() error {
	err := s.ln.Close()
	os.Remove(s.ln.Addr().String())
	done := make(chan struct{})
	go func() { s.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	return err
}

func (s *Server) handle(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	if err := checkPeer(c); err != nil {
		s.log.Warn("control: connection refused", "err", err)
		json.NewEncoder(c).Encode(response{Error: err.Error()})
		return
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	req, files, err := readRequest(c)
	defer func() {
		for _, f := range files {
			f.Close() // the handler keeps what it needs open (dup)
		}
	}()
	if err != nil {
		json.NewEncoder(c).Encode(response{Error: "bad request: " + err.Error()})
		return
	}
	c.SetReadDeadline(time.Time{})
	// The client waits for the outcome; if it goes away, stop waiting.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		var b [1]byte
		c.Read(b[:])
		cancel()
	}()
	json.NewEncoder(c).Encode(s.answer(cctx, req))
}

// readRequest reads one request and the files passed with it; the caller
// closes the files, whatever the error.
func readRequest(c *net.UnixConn) (request, []*os.File, error) {
	var req request
	first, files, err := readFirst(c)
	if err == nil {
		err = json.NewDecoder(io.LimitReader(io.MultiReader(bytes.NewReader(first), c), MaxRequest)).Decode(&req)
	}
	if err == nil && req.Payload != nil {
		err = req.Payload.receive(files)
	}
	return req, files, err
}

// answer carries out one request and says what came of it.
func (s *Server) answer(cctx context.Context, req request) (resp response) {
	switch req.Op {
	case "install":
		var o ota.Outcome
		var err error
		if ph, ok := s.h.(PayloadHandler); ok && req.Payload != nil {
			o, err = ph.InstallWithPayload(cctx, agent.SourceControl, req.Envelope, *req.Payload)
		} else if req.Payload != nil {
			for _, f := range req.Payload.Files {
				f.Close()
			}
			err = errors.New("this daemon takes no payload location")
		} else {
			o, err = s.h.InstallFrom(cctx, agent.SourceControl, req.Envelope)
		}
		if err != nil {
			resp.Error = err.Error()
		} else {
			resp.Outcome = &o
		}
	case "status":
		st := s.h.Status()
		resp.Status = &st
	case "trust-update":
		th, ok := s.h.(TrustHandler)
		if !ok {
			resp.Error = "this daemon takes no root of trust"
			break
		}
		from, to, err := th.UpdateRoot(cctx, req.Roots)
		// The versions go back with a refusal too: otad trust update
		// prints the version kept (docs/contract/trust.md).
		resp.Trust = &TrustUpdate{From: from, To: to}
		if err != nil {
			resp.Error, resp.Code = err.Error(), ota.CodeOf(err)
		}
	case "mark-good":
		if err := s.h.MarkGood(cctx); err != nil && !errors.Is(err, agent.ErrRebooted) {
			resp.Error = err.Error()
		}
	case "mark-bad":
		// Success here usually means the device is rebooting.
		if err := s.h.MarkBad(cctx); err != nil && !errors.Is(err, agent.ErrRebooted) {
			resp.Error = err.Error()
		}
	case "cancel":
		if err := s.h.Cancel(cctx); err != nil {
			resp.Error = err.Error()
		}
	case "mark-active":
		if req.Slot != "booted" && req.Slot != "other" {
			resp.Error = fmt.Sprintf("mark-active: slot %q is neither booted nor other", req.Slot)
			break
		}
		if err := s.h.MarkActive(cctx, req.Slot == "other"); err != nil && !errors.Is(err, agent.ErrRebooted) {
			resp.Error = err.Error()
		}
	default:
		resp.Error = fmt.Sprintf("unknown op %q", req.Op)
	}
	return resp
}

// checkPeer lets in root and the daemon's own user only: the socket's mode
// already says so, this holds even if someone loosens it.
func checkPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("uid %d may not control otad", cred.Uid)
	}
	return nil
}

// ErrNoDaemon means no daemon listens on the socket: the caller works in-process.
var ErrNoDaemon = errors.New("no otad daemon is running")

// Client talks to a running daemon.
type Client struct{ Path string }

func (c Client) call(ctx context.Context, req request, files ...*os.File) (response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Path)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return response{}, ErrNoDaemon
		}
		return response{}, fmt.Errorf("control socket %s: %w", c.Path, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := writeRequest(conn.(*net.UnixConn), req, files); err != nil {
		return response{}, fmt.Errorf("control socket %s: %w", c.Path, err)
	}
	var resp response
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		if ctx.Err() != nil {
			return response{}, ctx.Err()
		}
		return response{}, fmt.Errorf("control socket %s: %w", c.Path, err)
	}
	if resp.Error != "" {
		if resp.Code != "" {
			return resp, &ota.Error{Code: resp.Code, Err: errors.New(resp.Error)}
		}
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

// UpdateRoot hands root documents (or chains) to the daemon's root of
// trust. A refusal comes with the versions the daemon sent beside it: the
// version kept.
func (c Client) UpdateRoot(ctx context.Context, docs [][]byte) (TrustUpdate, error) {
	r, err := c.call(ctx, request{Op: "trust-update", Roots: docs})
	if err != nil {
		if r.Trust != nil {
			return *r.Trust, err
		}
		return TrustUpdate{}, err
	}
	if r.Trust == nil {
		return TrustUpdate{}, errors.New("daemon sent no answer to the root update")
	}
	return *r.Trust, nil
}

// Install hands an envelope to the daemon and waits for the outcome.
func (c Client) Install(ctx context.Context, raw []byte) (ota.Outcome, error) {
	r, err := c.call(ctx, request{Op: "install", Envelope: raw})
	if err != nil {
		return ota.Outcome{}, err
	}
	if r.Outcome == nil {
		return ota.Outcome{}, errors.New("daemon sent no outcome")
	}
	return *r.Outcome, nil
}

// Status asks the daemon for its status snapshot.
func (c Client) Status(ctx context.Context) (ota.Status, error) {
	r, err := c.call(ctx, request{Op: "status"})
	if err != nil {
		return ota.Status{}, err
	}
	if r.Status == nil {
		return ota.Status{}, errors.New("daemon sent no status")
	}
	return *r.Status, nil
}

// MarkGood asks the daemon to commit the booted slot.
func (c Client) MarkGood(ctx context.Context) error {
	_, err := c.call(ctx, request{Op: "mark-good"})
	return err
}

// MarkBad asks the daemon to reject the booted slot.
func (c Client) MarkBad(ctx context.Context) error {
	_, err := c.call(ctx, request{Op: "mark-bad"})
	return err
}

// Cancel asks the daemon to stop the running install.
func (c Client) Cancel(ctx context.Context) error {
	_, err := c.call(ctx, request{Op: "cancel"})
	return err
}

// MarkActive asks the daemon to make the booted slot (other false) or the
// other slot primary.
func (c Client) MarkActive(ctx context.Context, other bool) error {
	slot := "booted"
	if other {
		slot = "other"
	}
	_, err := c.call(ctx, request{Op: "mark-active", Slot: slot})
	return err
}
