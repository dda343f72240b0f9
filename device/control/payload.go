package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/ota"
)

// Payload is where an install's payload is read from when a person gives it
// (`otad install --payload`): URLs, or files the client opened and passed
// with the request (SCM_RIGHTS), since the daemon's sandbox may not see the
// client's paths (ProtectHome=, PrivateTmp=). Passed names the passed files'
// roles in order: "stream", or "index" and "store"; Paths their names, for
// messages.
type Payload struct {
	URL      string   `json:"url,omitempty"`
	IndexURL string   `json:"index_url,omitempty"`
	StoreURL string   `json:"store_url,omitempty"`
	Passed   []string `json:"passed,omitempty"`
	Paths    []string `json:"paths,omitempty"`
	// Files are the passed files, on the daemon's side, in Passed's order.
	Files []*os.File `json:"-"`
}

// PayloadHandler is a Handler that takes an install with its payload's
// location.
type PayloadHandler interface {
	InstallWithPayload(ctx context.Context, source string, raw []byte, p Payload) (ota.Outcome, error)
}

// maxPassed is the most files one request passes: a chunked payload's two.
const maxPassed = 2

// InstallPayload hands an envelope to the daemon with where its payload is
// read from, passing files (in p.Passed's order), and waits for the outcome.
func (c Client) InstallPayload(ctx context.Context, raw []byte, p Payload, files []*os.File) (ota.Outcome, error) {
	if len(files) != len(p.Passed) || len(files) > maxPassed {
		return ota.Outcome{}, fmt.Errorf("control: %d files for %d roles", len(files), len(p.Passed))
	}
	r, err := c.call(ctx, request{Op: "install", Envelope: raw, Payload: &p}, files...)
	if err != nil {
		return ota.Outcome{}, err
	}
	if r.Outcome == nil {
		return ota.Outcome{}, errors.New("daemon sent no outcome")
	}
	return *r.Outcome, nil
}

// writeRequest sends req, the files' descriptors with its first bytes.
func writeRequest(c *net.UnixConn, req request, files []*os.File) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if len(files) == 0 {
		_, err = c.Write(b)
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	n, _, err := c.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	if err != nil {
		return err
	}
	_, err = c.Write(b[n:])
	return err
}

// readFirst reads the request's first bytes and the descriptors sent with
// them (close-on-exec), at most maxPassed.
func readFirst(c *net.UnixConn) ([]byte, []*os.File, error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(maxPassed*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	var files []*os.File
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, fmt.Errorf("control message: %w", err)
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				unix.CloseOnExec(fd)
				files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("passed fd %d", fd)))
			}
		}
	}
	if flags&unix.MSG_CTRUNC != 0 {
		for _, f := range files {
			f.Close()
		}
		return nil, nil, fmt.Errorf("more than %d files passed", maxPassed)
	}
	return buf[:n], files, nil
}

// receive gives p the passed files, which must match its roles. The files
// are duplicated: the caller closes the originals.
func (p *Payload) receive(files []*os.File) error {
	if len(files) != len(p.Passed) {
		return fmt.Errorf("payload: %d files passed for %d (%v)", len(files), len(p.Passed), p.Passed)
	}
	for _, f := range files {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("payload: %w", err)
		}
		p.Files = append(p.Files, os.NewFile(uintptr(fd), f.Name()))
	}
	return nil
}
