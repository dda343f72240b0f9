package busapi

import (
	"strings"

	"github.com/godbus/dbus/v5"
)

// The names on the bus (docs/contract/dbus.md).
const (
	Name  = "io.github.otad.Agent1"
	Iface = Name
	Path  = dbus.ObjectPath("/io/github/otad/Agent1")
	// ErrorPrefix leads every error the interface returns: an ota code
	// (docs/contract/formats.md) follows it, or Failed.
	ErrorPrefix = Iface + ".Error."
)

// The object's interfaces as data, which one writer turns into the XML
// Introspect answers; the contract page lists the same members, and a test
// holds the two together.
type (
	busArg struct {
		name, typ string
		out       bool // a method's result; a signal's args have no direction
	}
	busMember struct {
		name string
		args []busArg
	}
	busProperty struct {
		name, typ   string
		invalidates bool // PropertiesChanged names it without its value
	}
	busIface struct {
		name             string
		properties       []busProperty
		methods, signals []busMember
	}
)

func argIn(name, typ string) busArg  { return busArg{name: name, typ: typ} }
func argOut(name, typ string) busArg { return busArg{name: name, typ: typ, out: true} }
func argSig(name, typ string) busArg { return busArg{name: name, typ: typ} } // a signal's

// interfaces are the object's, in the order Introspect lists them.
func interfaces() []busIface {
	return []busIface{
		{
			name: Iface,
			properties: []busProperty{
				{"State", "s", false}, {"BootedSlot", "s", false}, {"Slots", "a{s(sss)}", false}, {"Target", "(ssstt)", false},
				{"Pending", "(sss)", false}, {"LastResult", "(sssss)", false}, {"AgentVersion", "s", false}, {"Status", "s", true},
			},
			methods: []busMember{
				{"Install", []busArg{argIn("envelope", "h"), argOut("install", "t")}},
				{"InstallStream", []busArg{argIn("envelope", "h"), argIn("payload", "h"), argOut("install", "t")}},
				{"InstallChunked", []busArg{argIn("envelope", "h"), argIn("index", "h"), argIn("store", "h"), argOut("install", "t")}},
				{"Cancel", nil}, {"MarkGood", nil}, {"MarkBad", nil},
				{"MarkActive", []busArg{argIn("slot", "s")}},
			},
			signals: []busMember{
				{"Progress", []busArg{argSig("id", "s"), argSig("sha256", "s"), argSig("phase", "s"),
					argSig("bytes_done", "t"), argSig("bytes_total", "t"), argSig("bytes_per_second", "d")}},
				{"Completed", []busArg{argSig("install", "t"), argSig("result", "s"), argSig("code", "s"),
					argSig("message", "s"), argSig("id", "s"), argSig("sha256", "s")}},
			},
		},
		{
			name: "org.freedesktop.DBus.Properties",
			methods: []busMember{
				{"Get", []busArg{argIn("interface", "s"), argIn("property", "s"), argOut("value", "v")}},
				{"GetAll", []busArg{argIn("interface", "s"), argOut("properties", "a{sv}")}},
				{"Set", []busArg{argIn("interface", "s"), argIn("property", "s"), argIn("value", "v")}},
			},
			signals: []busMember{
				{"PropertiesChanged", []busArg{argSig("interface", "s"), argSig("changed", "a{sv}"), argSig("invalidated", "as")}},
			},
		},
		{
			name:    "org.freedesktop.DBus.Introspectable",
			methods: []busMember{{"Introspect", []busArg{argOut("xml", "s")}}},
		},
		{
			name:    "org.freedesktop.DBus.Peer",
			methods: []busMember{{"Ping", nil}, {"GetMachineId", []busArg{argOut("machine_uuid", "s")}}},
		},
	}
}

// introspection is what Introspect answers: the interfaces as XML. The
// names and types are the constants above, never outside input, so they
// need no escaping.
func introspection() string {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
<node>
`)
	for _, i := range interfaces() {
		b.WriteString(`  <interface name="` + i.name + `">` + "\n")
		for _, p := range i.properties {
			b.WriteString(`    <property name="` + p.name + `" type="` + p.typ + `" access="read"`)
			if !p.invalidates {
				b.WriteString("/>\n")
				continue
			}
			b.WriteString(">\n" + `      <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="invalidates"/>` + "\n    </property>\n")
		}
		writeMembers(&b, "method", i.methods, true)
		writeMembers(&b, "signal", i.signals, false)
		b.WriteString("  </interface>\n")
	}
	b.WriteString("</node>")
	return b.String()
}

// writeMembers writes methods or signals (element), their args with a
// direction for a method's.
func writeMembers(b *strings.Builder, element string, ms []busMember, directed bool) {
	for _, m := range ms {
		b.WriteString(`    <` + element + ` name="` + m.name + `"`)
		if len(m.args) == 0 {
			b.WriteString("/>\n")
			continue
		}
		b.WriteString(">\n")
		for _, a := range m.args {
			b.WriteString(`      <arg name="` + a.name + `" type="` + a.typ + `"`)
			if directed {
				dir := "in"
				if a.out {
					dir = "out"
				}
				b.WriteString(` direction="` + dir + `"`)
			}
			b.WriteString("/>\n")
		}
		b.WriteString("    </" + element + ">\n")
	}
}
