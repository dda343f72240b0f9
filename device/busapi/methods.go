package busapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/device/control"
	"github.com/otad/otad/ota"
)

// methods are the interface's methods; godbus exports every method of
// this type, so it has no others.
type methods struct{ o *Object }

// Install installs an envelope whose payload is read from the offer's URL.
// It answers once the envelope is read, with a number the Completed signal
// carries when the install has an outcome.
func (m methods) Install(envelope dbus.UnixFD) (uint64, *dbus.Error) {
	return m.o.install(envelope, nil, nil)
}

// InstallStream installs an envelope whose stream payload (schema 1) is the
// passed file.
func (m methods) InstallStream(envelope, payload dbus.UnixFD) (uint64, *dbus.Error) {
	return m.o.install(envelope, []string{"stream"}, []dbus.UnixFD{payload})
}

// InstallChunked installs an envelope whose chunked payload's index and
// store are the passed files (docs/contract/chunked.md).
func (m methods) InstallChunked(envelope, index, store dbus.UnixFD) (uint64, *dbus.Error) {
	return m.o.install(envelope, []string{"index", "store"}, []dbus.UnixFD{index, store})
}

// Cancel stops the running install (otad cancel).
func (m methods) Cancel() *dbus.Error { return m.o.command(m.o.h.Cancel) }

// MarkGood commits the booted slot (otad mark-good).
func (m methods) MarkGood() *dbus.Error { return m.o.command(m.o.h.MarkGood) }

// MarkBad rejects the booted slot (otad mark-bad).
func (m methods) MarkBad() *dbus.Error { return m.o.command(m.o.h.MarkBad) }

// MarkActive is otad mark-active: slot is "booted" or "other".
func (m methods) MarkActive(slot string) *dbus.Error {
	if slot != "booted" && slot != "other" {
		return invalidArgs(fmt.Sprintf("MarkActive: slot %q is neither booted nor other", slot))
	}
	return m.o.command(func(ctx context.Context) error { return m.o.h.MarkActive(ctx, slot == "other") })
}

// commandTimeout bounds an operator's command: it waits for the agent's
// loop, which takes it between two effects.
const commandTimeout = time.Minute

// command runs an operator's command as the control socket does: a
// reboot that follows it is its success.
func (o *Object) command(fn func(context.Context) error) *dbus.Error {
	ctx, cancel := context.WithTimeout(o.ctx, commandTimeout)
	defer cancel()
	if err := fn(ctx); err != nil && !errors.Is(err, agent.ErrRebooted) {
		return busError(err)
	}
	return nil
}

// busError names err on the bus: its ota code, or Failed.
func busError(err error) *dbus.Error {
	name := ErrorPrefix + "Failed"
	if c := ota.CodeOf(err); c != "" {
		name = ErrorPrefix + string(c)
	}
	return dbus.NewError(name, []any{err.Error()})
}

func invalidArgs(msg string) *dbus.Error {
	return dbus.NewError("org.freedesktop.DBus.Error.InvalidArgs", []any{msg})
}

// install reads the envelope, then hands it and the payload's files (in
// roles' order) to the handler as the control socket does, and reports
// the outcome in a Completed signal. The files passed are the handler's
// from then on; it closes them.
func (o *Object) install(envelope dbus.UnixFD, roles []string, fds []dbus.UnixFD) (uint64, *dbus.Error) {
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = adopt(fd, roles[i])
	}
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	raw, err := readEnvelope(envelope)
	if err != nil {
		closeAll()
		return 0, invalidArgs(err.Error())
	}
	ph, ok := o.h.(control.PayloadHandler)
	if len(files) > 0 && !ok {
		closeAll()
		return 0, busError(errors.New("this daemon takes no payload files"))
	}
	// As otad install --payload's exit 4: said at once, not as an outcome.
	// The handler checks again, as the state may change meanwhile.
	if len(files) > 0 {
		if err := agent.GivenPayloadBusy(o.h.Status()); err != nil {
			closeAll()
			return 0, dbus.NewError(ErrorPrefix+"Busy", []any{err.Error()})
		}
	}
	n := o.installs.Add(1)
	go func() {
		var out ota.Outcome
		var err error
		if len(files) > 0 {
			p := control.Payload{Passed: roles, Files: files}
			for _, f := range files {
				p.Paths = append(p.Paths, f.Name())
			}
			out, err = ph.InstallWithPayload(o.ctx, agent.SourceBus, raw, p)
		} else {
			out, err = o.h.InstallFrom(o.ctx, agent.SourceBus, raw)
		}
		if err != nil {
			out = ota.Outcome{Result: ota.ResultFailed, Code: ota.CodeOf(err), Message: err.Error()}
		}
		o.signal("Completed", n, string(out.Result), string(out.Code), out.Message, out.ID, out.SHA256)
	}()
	return n, nil
}

// adopt makes a passed descriptor a file, named by what it is open on in
// this process (the caller's path, for messages).
func adopt(fd dbus.UnixFD, role string) *os.File {
	unix.CloseOnExec(int(fd))
	name := role
	if p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil {
		name = p
	}
	return os.NewFile(uintptr(fd), name)
}

// envelopeWait bounds reading an envelope from a pipe whose writer stays
// open.
const envelopeWait = 10 * time.Second

// readEnvelope reads at most ota.MaxEnvelopeSize bytes from fd and closes it.
func readEnvelope(fd dbus.UnixFD) ([]byte, error) {
	// A pipe or socket is read with a deadline: non-blocking, os.NewFile
	// puts it in the poller. A regular file cannot block (and takes none).
	var st unix.Stat_t
	pollable := unix.Fstat(int(fd), &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFREG &&
		unix.SetNonblock(int(fd), true) == nil
	f := adopt(fd, "envelope")
	defer f.Close()
	if pollable {
		f.SetReadDeadline(time.Now().Add(envelopeWait))
	}
	raw, err := io.ReadAll(io.LimitReader(f, ota.MaxEnvelopeSize+1))
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	if len(raw) > ota.MaxEnvelopeSize {
		return nil, fmt.Errorf("envelope: over %d bytes", ota.MaxEnvelopeSize)
	}
	return raw, nil
}
