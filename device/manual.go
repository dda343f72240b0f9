package device

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/otad/otad/device/busapi"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/ota"
)

// exitCodes are otad's exit codes (docs/contract/commands.md): the usage's
// last line and the man page's EXIT STATUS.
var exitCodes = []cli.Item{
	{Term: fmt.Sprint(ota.ExitOK), Text: "ok"},
	{Term: fmt.Sprint(ota.ExitFailure), Text: "failure"},
	{Term: fmt.Sprint(ota.ExitUsage), Text: "usage or bad config"},
	{Term: fmt.Sprint(ota.ExitRefused), Text: "offer refused (a check failed; the error names its code)"},
	{Term: fmt.Sprint(ota.ExitBusy), Text: "busy (another otad holds the state lock)"},
	{Term: fmt.Sprint(ota.ExitNeedsOperator), Text: "needs an operator (otad run cannot work until someone acts)"},
}

// Manual is otad's man page and completions: every command of the table
// (and its subcommands) asked for -h, its flag set read, and this prose.
func Manual(ctx context.Context, version string) (cli.Manual, error) {
	m := cli.Manual{
		Name:     "otad",
		Section:  "8",
		Title:    "A/B over-the-air update agent for embedded Linux",
		Version:  version,
		Synopsis: "COMMAND [-c FILE] [-v] [flags] [args]",
		Description: []string{
			"otad installs signed OS images into the inactive slot of an A/B partitioned device, switches the bootloader (U-Boot or GRUB, with RAUC-compatible variables) to it, and commits the new slot after a health check or rolls back. Offers come over MQTT or from the command line; an install resumes after a power cut.",
			"otad run is the daemon (otad.service). The other commands talk to it over its control socket when it runs, and otherwise do the work in the process. Every command takes -c FILE (default " + config.DefaultPath + ") and -v (debug logging); flags may come before or after the arguments, with one dash or two.",
		},
		Env: []cli.Item{
			{Term: "NOTIFY_SOCKET, WATCHDOG_USEC", Text: "set by systemd: otad run reports readiness and pets the watchdog"},
			{Term: "JOURNAL_STREAM", Text: "set by systemd when stderr is the journal: each line carries its priority, and no progress bar is drawn"},
			{Term: "TERM", Text: "dumb: no progress bar on a terminal"},
			{Term: "DBUS_SYSTEM_BUS_ADDRESS", Text: "the D-Bus system bus otad run joins; unset: /run/dbus/system_bus_socket (docs/contract/dbus.md)"},
		},
		Exit: exitCodes,
		Files: []cli.Item{
			{Term: config.DefaultPath, Text: "the config; otad config check says what is left to edit"},
			{Term: "/etc/otad/keys.d", Text: "the public keys offers must be signed with"},
			{Term: "/var/lib/otad", Text: "the state directory: the journal of the install in progress, what each slot holds"},
			{Term: config.DefaultControlSocket, Text: "the control socket, by which the other commands reach otad run (control_socket in the config)"},
			{Term: "/usr/share/dbus-1/system.d/" + busapi.Name + ".conf", Text: "the D-Bus policy: root may own the name, root and the group otad may call otad on the system bus"},
			{Term: "/usr/libexec/otad/health-check", Text: "the shipped health check run before a new slot is committed"},
			{Term: "/usr/share/doc/otad", Text: "operating.md (bringing up a board), the contract pages, the boot scripts"},
		},
		Examples: []cli.Item{
			{Term: "otad config check", Text: "Check the config and print the effective settings, or each error with its key."},
			{Term: "otad config check --unit-dropin >/etc/systemd/system/otad.service.d/board.conf", Text: "Write the systemd drop-in that lets the unit reach the board's slots and bootloader environment."},
			{Term: "systemctl enable --now otad", Text: "Start the daemon."},
			{Term: "otad info offer.json", Text: "What an offer is, and whether this device would install it."},
			{Term: "otad install offer.json", Text: "Install an offer by hand (through the daemon if it runs)."},
			{Term: "otad status --json", Text: "The booted slot, each slot's contents, the state and the last result."},
			{Term: "otad mark-good", Text: "Commit the booted slot (the health check does this after an update)."},
		},
		SeeAlso: []string{"otactl(1)", "systemd.service(5)"},
	}
	order, cmds := commands()
	subs := subcommands()
	for _, n := range order {
		paths := []string{n}
		if s := subs[n]; s != nil {
			m.Commands = append(m.Commands, cli.ManCommand{Path: n, Summary: cmds[n].summary, Subs: s})
			paths = nil
			for _, sub := range s {
				paths = append(paths, n+" "+sub)
			}
		}
		for _, p := range paths {
			e := &env{ctx: ctx, version: version, stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
			cmds[n].run(e, append(strings.Fields(p), "-h"))
			if e.help == nil {
				return m, fmt.Errorf("otad %s -h: no flag set (a command with subcommands lists them in subcommands())", p)
			}
			summary := cmds[n].summary
			if p != n {
				summary = ""
			}
			mc, err := cli.ReadHelp("otad", p, summary, *e.help)
			if err != nil {
				return m, err
			}
			m.Commands = append(m.Commands, mc)
		}
	}
	m.Commands = append(m.Commands, cli.ManCommand{Path: "help", Synopsis: "[COMMAND]", Summary: "this help, or a command's flags"})
	return m, nil
}

func cmdCompletion(e *env, args []string) int {
	pos, code, done := e.flags(args, 1, nil)
	if done {
		return code
	}
	m, err := Manual(e.ctx, e.version)
	if err != nil {
		return e.fail(ota.ExitFailure, "reading the command table: %v", err)
	}
	if err := m.Completion(e.stdout, pos[0]); err != nil {
		return e.fail(ota.ExitUsage, "completion: %v", err)
	}
	return ota.ExitOK
}
