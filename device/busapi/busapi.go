package busapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"syscall"

	"github.com/godbus/dbus/v5"

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

	h     control.Handler
	conn  *dbus.Conn
	props props
	ctx   context.Context // the daemon's: installs asked for on the bus run in it
}

// New makes the object, off the bus.
func New(log *slog.Logger) *Object {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Object{log: log, changed: make(chan struct{}, 1), moved: make(chan struct{}, 1),
		machineIDFiles: []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}}
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
// and signals up to date until ctx ends or stop is called. h is what the
// control socket serves: the methods take the same paths. ErrNoBus (wrapped)
// when no bus answers at the address.
func (o *Object) Start(ctx context.Context, h control.Handler) (stop func(), err error) {
	conn, err := dbus.ConnectSystemBus(dbus.WithIncomingInterceptor(redirectPeer))
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: %w", ErrNoBus, err)
		}
		return nil, fmt.Errorf("d-bus: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	o.h, o.conn, o.ctx = h, conn, ctx
	o.props.update(values(h.Status()))
	if err := o.export(); err != nil {
		cancel()
		conn.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.emit(ctx)
	}()
	return func() {
		cancel()
		<-done
		conn.Close()
	}, nil
}

// export puts the object's interfaces on Path, then takes the name: a
// client that finds the name finds the whole object. Method tables, not
// godbus's Export: Export finds methods by reflection, which keeps every
// exported method of the binary alive (a bigger otad).
func (o *Object) export() error {
	for iface, table := range o.tables() {
		if err := o.conn.ExportMethodTable(table, Path, iface); err != nil {
			return fmt.Errorf("d-bus: export %s: %w", iface, err)
		}
	}
	reply, err := o.conn.RequestName(Name, dbus.NameFlagDoNotQueue)
	if err != nil {
		return fmt.Errorf("d-bus: own %s: %w (is the bus policy installed? docs/contract/dbus.md)", Name, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		return fmt.Errorf("d-bus: %s is owned by another process", Name)
	}
	return nil
}

// emit sends what changed: PropertiesChanged after a transition or a
// progress report, and the Progress signal.
func (o *Object) emit(ctx context.Context) {
	o.refresh() // what changed between Start and now
	for {
		select {
		case <-ctx.Done():
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
	if err := o.conn.Emit(Path, "org.freedesktop.DBus.Properties.PropertiesChanged", Iface, changed, invalidated); err != nil {
		o.log.Debug("d-bus: PropertiesChanged not sent", "err", err)
	}
}

func (o *Object) signal(name string, args ...any) {
	if err := o.conn.Emit(Path, Iface+"."+name, args...); err != nil {
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
		peerIface: {"Ping": func() *dbus.Error { return nil }, "GetMachineId": o.getMachineID},
	}
}
