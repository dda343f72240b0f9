package busapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/otad/otad/backoff"
	"github.com/otad/otad/device/control"
	"github.com/otad/otad/ota"
)

// ErrNoBus means there is no system bus to join: otad goes on without it.
var ErrNoBus = errors.New("no D-Bus system bus")

// Object is the agent's object on the bus. It is one of the agent's
// publishers from the start (New) and joins the bus once the daemon runs
// (Start): what the agent publishes before then is read from the status
// when it does.
type Object struct {
	log *slog.Logger
	// changed and moved wake the emitter; they hold at most one wake-up
	// each, so the agent's loop never waits on the bus.
	changed, moved chan struct{}
	latest         atomic.Pointer[ota.Progress]
	installs       atomic.Uint64 // the numbers Install hands out

	// machineIDFiles are read, first found first, for Peer.GetMachineId.
	machineIDFiles []string

	// rejoinPolicy paces joining the bus again after it went away.
	rejoinPolicy backoff.Policy

	h     control.Handler
	conn  atomic.Pointer[dbus.Conn] // the latest; signals go there
	props props
	ctx   context.Context // the daemon's: installs asked for on the bus run in it
}

// New makes the object, off the bus.
func New(log *slog.Logger) *Object {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Object{log: log, changed: make(chan struct{}, 1), moved: make(chan struct{}, 1),
		machineIDFiles: []string{"/etc/machine-id", "/var/lib/dbus/machine-id"},
		// A restarted bus is back within seconds; one gone for long is
		// asked again every half minute at most.
		rejoinPolicy: backoff.Policy{Base: time.Second, Max: 30 * time.Second}}
}

// Publish is the agent's transition: the properties follow it.
func (o *Object) Publish(ota.Status, ota.Event) { wake(o.changed) }

// Progress is the install's progress: a Progress signal, and Target's bytes.
// Reports the bus has not taken yet are replaced by the newest.
func (o *Object) Progress(p ota.Progress) {
	o.latest.Store(&p)
	wake(o.moved)
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Start joins the system bus (DBUS_SYSTEM_BUS_ADDRESS, or the standard
// socket), exports the object and takes the name, and keeps the properties
// and signals up to date until ctx ends or stop is called. When the bus
// goes away (dbus-daemon restarted), it logs so once and joins again with
// a bounded backoff until it is back (docs/contract/dbus.md). h is what
// the control socket serves: the methods take the same paths. ErrNoBus
// (wrapped) when no bus answers at the address.
func (o *Object) Start(ctx context.Context, h control.Handler) (stop func(), err error) {
	conn, err := dial()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	o.h, o.ctx = h, ctx
	o.props.update(values(h.Status()))
	if err := o.export(conn); err != nil {
		cancel()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.serve(ctx, conn)
	}()
	return func() {
		cancel()
		<-done
	}, nil
}

func dial() (*dbus.Conn, error) {
	conn, err := dbus.ConnectSystemBus(dbus.WithIncomingInterceptor(redirectPeer))
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: %w", ErrNoBus, err)
		}
		return nil, fmt.Errorf("d-bus: %w", err)
	}
	return conn, nil
}

// export puts the object's interfaces on Path, then takes the name: a
// client that finds the name finds the whole object. Method tables, not
// godbus's Export: Export finds methods by reflection, which keeps every
// exported method of the binary alive (a bigger otad). On an error conn
// is closed.
func (o *Object) export(conn *dbus.Conn) error {
	for iface, table := range o.tables() {
		if err := conn.ExportMethodTable(table, Path, iface); err != nil {
			conn.Close()
			return fmt.Errorf("d-bus: export %s: %w", iface, err)
		}
	}
	reply, err := conn.RequestName(Name, dbus.NameFlagDoNotQueue)
	switch {
	case err != nil:
		err = fmt.Errorf("d-bus: own %s: %w (is the bus policy installed? docs/contract/dbus.md)", Name, err)
	case reply != dbus.RequestNameReplyPrimaryOwner:
		err = fmt.Errorf("d-bus: %s is owned by another process", Name)
	}
	if err != nil {
		conn.Close()
		return err
	}
	o.conn.Store(conn)
	return nil
}

// serve emits on conn until it is lost, then joins again, until ctx ends.
func (o *Object) serve(ctx context.Context, conn *dbus.Conn) {
	for conn != nil {
		o.emit(ctx, conn.Context())
		conn.Close()
		if ctx.Err() != nil {
			return
		}
		o.log.Warn("left D-Bus: the bus connection is lost; joining again", "name", Name)
		conn = o.rejoin(ctx)
	}
}

// rejoin joins the bus again, waiting longer after each failure (at most
// rejoinPolicy.Max), until it is back or ctx ends (nil).
func (o *Object) rejoin(ctx context.Context) *dbus.Conn {
	for n := 0; ; n++ {
		if o.rejoinPolicy.Wait(ctx, n, 0) != nil {
			return nil
		}
		conn, err := dial()
		if err == nil {
			err = o.export(conn)
		}
		if err == nil {
			o.log.Info("on D-Bus again", "name", Name, "attempts", n+1)
			return conn
		}
		o.log.Debug("d-bus: joining again failed", "attempt", n+1, "err", err)
	}
}

// emit sends what changed: PropertiesChanged after a transition or a
// progress report, and the Progress signal.
// It returns when ctx ends or the connection is lost.
func (o *Object) emit(ctx, connected context.Context) {
	o.refresh() // what changed between joining and now
	for {
		select {
		case <-ctx.Done():
			return
		case <-connected.Done():
			return
		case <-o.changed:
			o.refresh()
		case <-o.moved:
			if p := o.latest.Load(); p != nil {
				o.signal("Progress", p.ID, p.SHA256, string(p.Phase), count(p.BytesDone), count(p.BytesTotal), p.BytesPerSecond)
			}
			o.refresh()
		}
	}
}

func (o *Object) refresh() {
	changed, invalidated := o.props.update(values(o.h.Status()))
	if len(changed) == 0 && len(invalidated) == 0 {
		return
	}
	if invalidated == nil {
		invalidated = []string{}
	}
	if err := o.conn.Load().Emit(Path, "org.freedesktop.DBus.Properties.PropertiesChanged", Iface, changed, invalidated); err != nil {
		o.log.Debug("d-bus: PropertiesChanged not sent", "err", err)
	}
}

func (o *Object) signal(name string, args ...any) {
	if err := o.conn.Load().Emit(Path, Iface+"."+name, args...); err != nil {
		o.log.Debug("d-bus: signal not sent", "signal", name, "err", err)
	}
}

// tables are the object's methods by interface, as the introspection
// announces them (a test holds the two together).
func (o *Object) tables() map[string]map[string]any {
	m := methods{o}
	return map[string]map[string]any{
		Iface: {
			"Install": m.Install, "InstallStream": m.InstallStream, "InstallChunked": m.InstallChunked,
			"Cancel": m.Cancel, "MarkGood": m.MarkGood, "MarkBad": m.MarkBad, "MarkActive": m.MarkActive,
		},
		"org.freedesktop.DBus.Properties":     {"Get": o.props.Get, "GetAll": o.props.GetAll, "Set": o.props.Set},
		"org.freedesktop.DBus.Introspectable": {"Introspect": func() (string, *dbus.Error) { return introspection(), nil }},
		peerIface:                             {"Ping": func() *dbus.Error { return nil }, "GetMachineId": o.getMachineID},
	}
}
