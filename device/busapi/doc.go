// Package busapi is otad on the D-Bus system bus (docs/contract/dbus.md):
// the well-known name io.github.otad.Agent1 and one object whose
// properties follow the agent's status, whose methods go to the same
// entry points as the control socket's (device/control.Handler: one
// install at a time, through the agent's inbox), and whose signals report
// progress and the end of the installs asked for on the bus. Who may call
// it is the bus's policy (packaging/dbus/io.github.otad.Agent1.conf).
package busapi
