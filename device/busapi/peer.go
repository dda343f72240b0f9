package busapi

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/godbus/dbus/v5"
)

// peerIface is where otad's org.freedesktop.DBus.Peer is exported. godbus
// answers Peer calls itself, before any exported table, and its
// GetMachineId gives the bus daemon's GUID, not the machine's ID
// (docs/contract/dbus.md): redirectPeer moves each Peer call here.
const peerIface = "io.github.otad.Agent1.internal.Peer"

// redirectPeer is the connection's incoming interceptor: a Peer call, on
// whatever path (Peer is the connection's, not an object's), goes to
// peerIface on Path. It runs before godbus dispatches the call.
func redirectPeer(msg *dbus.Message) {
	if msg.Type != dbus.TypeMethodCall {
		return
	}
	if iface, _ := msg.Headers[dbus.FieldInterface].Value().(string); iface != "org.freedesktop.DBus.Peer" {
		return
	}
	msg.Headers[dbus.FieldInterface] = dbus.MakeVariant(peerIface)
	msg.Headers[dbus.FieldPath] = dbus.MakeVariant(Path)
}

// getMachineID is Peer.GetMachineId: the machine's ID, as the D-Bus
// specification has it (what libdbus answers too).
func (o *Object) getMachineID() (string, *dbus.Error) {
	id, err := machineID(o.machineIDFiles)
	if err != nil {
		return "", dbus.NewError("org.freedesktop.DBus.Error.Failed", []any{err.Error()})
	}
	return id, nil
}

// machineID reads the first of files that holds a machine ID: 32
// lowercase hex digits and a newline (machine-id(5)).
func machineID(files []string) (string, error) {
	var errs []error
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		id := strings.TrimSuffix(string(b), "\n")
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			errs = append(errs, fmt.Errorf("%s: not a machine ID", f))
			continue
		}
		return id, nil
	}
	return "", fmt.Errorf("no machine ID: %w", errors.Join(errs...))
}
