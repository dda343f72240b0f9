package busapi

import (
	"encoding/json"
	"reflect"
	"sync"

	"github.com/godbus/dbus/v5"

	"github.com/otad/otad/ota"
)

// The properties' D-Bus shapes (docs/contract/dbus.md); a field absent from
// the status is an empty string or zero.
type (
	slotInfo struct{ Version, Status, SHA256 string }
	target   struct {
		ID, Version, SHA256   string
		BytesDone, BytesTotal uint64
	}
	offer  struct{ ID, Version, SHA256 string }
	result struct{ Result, Code, Message, ID, SHA256 string }
)

// statusProp is the one property whose changes are announced by name only:
// it changes with every other one.
const statusProp = "Status"

// values are the properties' values for a status snapshot.
func values(st ota.Status) map[string]any {
	slots := map[string]slotInfo{}
	for name, s := range st.Slots {
		slots[string(name)] = slotInfo{Version: s.Version, Status: string(s.Status), SHA256: s.SHA256}
	}
	var tg target
	if t := st.Target; t != nil {
		tg = target{ID: t.ID, Version: t.Version, SHA256: t.SHA256, BytesDone: count(t.BytesDone), BytesTotal: count(t.BytesTotal)}
	}
	var pd offer
	if p := st.Pending; p != nil {
		pd = offer{ID: p.ID, Version: p.Version, SHA256: p.SHA256}
	}
	var last result
	if r := st.LastResult; r != nil {
		last = result{Result: string(r.Result), Code: string(r.Code), Message: r.Message, ID: r.ID, SHA256: r.SHA256}
	}
	js, _ := json.Marshal(st) // plain data: cannot fail
	return map[string]any{
		"State": string(st.State), "BootedSlot": string(st.BootedSlot), "Slots": slots,
		"Target": tg, "Pending": pd, "LastResult": last, "AgentVersion": st.AgentVersion,
		statusProp: string(js),
	}
}

// count is a byte count as D-Bus's unsigned 't'.
func count(n int64) uint64 { return uint64(max(n, 0)) }

// props are the interface's read-only properties: org.freedesktop.DBus.Properties.
type props struct {
	mu sync.Mutex
	v  map[string]any
}

// ourIface says whether a Get or GetAll names the interface that has the
// properties: Iface, or "", which the D-Bus specification lets a caller
// give for "whichever interface has it" (docs/contract/dbus.md).
func ourIface(iface string) bool { return iface == Iface || iface == "" }

func (p *props) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !ourIface(iface) {
		return dbus.Variant{}, unknownInterface(iface)
	}
	v, ok := p.v[name]
	if !ok {
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{"no property " + name})
	}
	return dbus.MakeVariant(v), nil
}

func (p *props) GetAll(iface string) (map[string]dbus.Variant, *dbus.Error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !ourIface(iface) {
		return nil, unknownInterface(iface)
	}
	all := make(map[string]dbus.Variant, len(p.v))
	for k, v := range p.v {
		all[k] = dbus.MakeVariant(v)
	}
	return all, nil
}

func (p *props) Set(iface, name string, _ dbus.Variant) *dbus.Error {
	return dbus.NewError("org.freedesktop.DBus.Error.PropertyReadOnly", []any{name + " is read-only"})
}

func unknownInterface(iface string) *dbus.Error {
	return dbus.NewError("org.freedesktop.DBus.Error.UnknownInterface", []any{"no interface " + iface})
}

// update takes new values and says which changed: with their values, and
// by name only for Status.
func (p *props) update(vals map[string]any) (changed map[string]dbus.Variant, invalidated []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed = map[string]dbus.Variant{}
	for k, v := range vals {
		if old, ok := p.v[k]; ok && reflect.DeepEqual(old, v) {
			continue
		}
		if k == statusProp {
			invalidated = append(invalidated, k)
		} else {
			changed[k] = dbus.MakeVariant(v)
		}
	}
	p.v = vals
	return changed, invalidated
}
