package busapi

import "github.com/godbus/dbus/v5"

// The names on the bus (docs/contract/dbus.md).
const (
	Name  = "io.github.otad.Agent1"
	Iface = Name
	Path  = dbus.ObjectPath("/io/github/otad/Agent1")
	// ErrorPrefix leads every error the interface returns: an ota code
	// (docs/contract/formats.md) follows it, or Failed.
	ErrorPrefix = Iface + ".Error."
)

// introspection is what Introspect answers; the contract page lists the
// same members, and a test holds the two together.
const introspection = `<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
<node>
  <interface name="io.github.otad.Agent1">
    <property name="State" type="s" access="read"/>
    <property name="BootedSlot" type="s" access="read"/>
    <property name="Slots" type="a{s(sss)}" access="read"/>
    <property name="Target" type="(ssstt)" access="read"/>
    <property name="Pending" type="(sss)" access="read"/>
    <property name="LastResult" type="(sssss)" access="read"/>
    <property name="AgentVersion" type="s" access="read"/>
    <property name="Status" type="s" access="read">
      <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="invalidates"/>
    </property>
    <method name="Install">
      <arg name="envelope" type="h" direction="in"/>
      <arg name="install" type="t" direction="out"/>
    </method>
    <method name="InstallStream">
      <arg name="envelope" type="h" direction="in"/>
      <arg name="payload" type="h" direction="in"/>
      <arg name="install" type="t" direction="out"/>
    </method>
    <method name="InstallChunked">
      <arg name="envelope" type="h" direction="in"/>
      <arg name="index" type="h" direction="in"/>
      <arg name="store" type="h" direction="in"/>
      <arg name="install" type="t" direction="out"/>
    </method>
    <method name="Cancel"/>
    <method name="MarkGood"/>
    <method name="MarkBad"/>
    <method name="MarkActive">
      <arg name="slot" type="s" direction="in"/>
    </method>
    <signal name="Progress">
      <arg name="id" type="s"/>
      <arg name="sha256" type="s"/>
      <arg name="phase" type="s"/>
      <arg name="bytes_done" type="t"/>
      <arg name="bytes_total" type="t"/>
      <arg name="bytes_per_second" type="d"/>
    </signal>
    <signal name="Completed">
      <arg name="install" type="t"/>
      <arg name="result" type="s"/>
      <arg name="code" type="s"/>
      <arg name="message" type="s"/>
      <arg name="id" type="s"/>
      <arg name="sha256" type="s"/>
    </signal>
  </interface>
  <interface name="org.freedesktop.DBus.Properties">
    <method name="Get">
      <arg name="interface" type="s" direction="in"/>
      <arg name="property" type="s" direction="in"/>
      <arg name="value" type="v" direction="out"/>
    </method>
    <method name="GetAll">
      <arg name="interface" type="s" direction="in"/>
      <arg name="properties" type="a{sv}" direction="out"/>
    </method>
    <method name="Set">
      <arg name="interface" type="s" direction="in"/>
      <arg name="property" type="s" direction="in"/>
      <arg name="value" type="v" direction="in"/>
    </method>
    <signal name="PropertiesChanged">
      <arg name="interface" type="s"/>
      <arg name="changed" type="a{sv}"/>
      <arg name="invalidated" type="as"/>
    </signal>
  </interface>
  <interface name="org.freedesktop.DBus.Introspectable">
    <method name="Introspect">
      <arg name="xml" type="s" direction="out"/>
    </method>
  </interface>
  <interface name="org.freedesktop.DBus.Peer">
    <method name="Ping"/>
    <method name="GetMachineId">
      <arg name="machine_uuid" type="s" direction="out"/>
    </method>
  </interface>
</node>`
