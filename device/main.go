package device

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/daemon"
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/ota"
)

type command struct {
	args    string // after the name in the usage, flags aside
	summary string
	run     func(e *env, args []string) int // args[0] is the command's name
}

// subcommands names each command's subcommands ("config check"): the man
// page and the completions ask each for -h (manual.go), and a test fails on
// a command whose -h shows no flags and that has none listed here.
func subcommands() map[string][]string {
	return map[string][]string{"config": {"check"}, "trust": {"update"}}
}

// commands is otad's command table (docs/contract/commands.md), in the order the usage lists it.
func commands() ([]string, map[string]command) {
	return []string{"run", "install", "cancel", "info", "status", "mark-good", "mark-bad", "mark-active", "trust", "config", "completion", "version"}, map[string]command{
		"run":         {"", "the daemon (systemd Type=notify, watchdog aware)", cmdRun},
		"install":     {"[--payload P] FILE", "install a signed offer envelope (through the daemon if it runs)", cmdInstall},
		"cancel":      {"", "stop the running download or install (the slot is not marked; the offer stays retryable)", cmdCancel},
		"mark-active": {"booted|other", "booted: drop a staged install; other: make the other slot's verified image primary", cmdMarkActive},
		"info":        {"[--json] FILE", "what an offer is, and whether this device would install it (nothing fetched)", cmdInfo},
		"status":      {"[--json]", "booted slot, slot contents, state, last result", cmdStatus},
		"mark-good":   {"", "commit the booted slot", cmdMark},
		"mark-bad":    {"", "reject the booted slot and return to the other one", cmdMark},
		"trust":       {"update FILE...", "take root documents of trust (docs/contract/trust.md) through the daemon if it runs", cmdTrust},
		"config":      {"check", "check the config; print the effective settings or each error", cmdConfig},
		"completion":  {"bash|zsh|fish", "print the completion script of a shell", cmdCompletion},
		"version":     {"", "print the version (also --version)", cmdVersion},
	}
}

func usage(w io.Writer) {
	order, cmds := commands()
	fmt.Fprintf(w, "usage: otad COMMAND [-c FILE] [-v] [args]\n\ncommands:\n")
	for _, n := range order {
		fmt.Fprintf(w, "  %-26s %s\n", strings.TrimSpace(n+" "+cmds[n].args), cmds[n].summary)
	}
	fmt.Fprintf(w, "  %-26s %s\n", "help [COMMAND]", "this help, or a command's flags")
	fmt.Fprintf(w, "\nEvery command takes -c FILE (default %s) and -v (debug logging).\n", config.DefaultPath)
	fmt.Fprintln(w, cli.ExitNote(exitCodes))
}

func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// Run is otad: args are the command line after the program's name; version
// is the one the binary was built with. It returns the exit code
// (docs/contract/commands.md).
func Run(ctx context.Context, version string, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return ota.ExitUsage
	}
	args = hoistFlags(args)
	if cli.IsVersion(args[0]) {
		args[0] = "version" // --version, as every program answers it
	}
	if isHelp(args[0]) {
		if len(args) == 1 {
			usage(stdout)
			return ota.ExitOK
		}
		// "otad help install" is "otad install -h".
		args = []string{args[1], "-h"}
	}
	_, cmds := commands()
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "otad: unknown command %q\n", args[0])
		usage(stderr)
		return ota.ExitUsage
	}
	e := &env{ctx: ctx, version: version, stdout: stdout, stderr: stderr, machine: "/etc/machine-id", getenv: os.Getenv,
		journal: isJournal(stderr)}
	return cmd.run(e, args)
}

// hoistFlags moves -c FILE and -v given before the command ("otad -c FILE
// status", as systemd units and muscle memory write it) after the command's
// name, where its flags are parsed.
func hoistFlags(args []string) []string {
	var lead []string
	for len(args) > 0 {
		switch a := args[0]; {
		case a == "-v" || a == "--v" || strings.HasPrefix(a, "-c=") || strings.HasPrefix(a, "--c="):
			lead, args = append(lead, a), args[1:]
		case (a == "-c" || a == "--c") && len(args) > 1:
			lead, args = append(lead, a, args[1]), args[2:]
		default:
			n := min(1, len(args)) // after the name: "config check" has two words
			if len(args) > 1 && slices.Contains(subcommands()[args[0]], args[1]) {
				n = 2
			}
			return append(append(slices.Clone(args[:n]), lead...), args[n:]...)
		}
	}
	return lead
}

func cmdVersion(e *env, args []string) int {
	if _, code, done := e.flags(args, 0, nil); done {
		return code
	}
	fmt.Fprintln(e.stdout, "otad", e.version)
	return ota.ExitOK
}

func cmdRun(e *env, args []string) int {
	_, cfg, code := e.setup(args, 0, nil)
	if cfg == nil {
		return code
	}
	lock, code := e.lock(cfg)
	if lock == nil {
		return code
	}
	defer lock.Release()
	limitMemory()
	spareProc()
	pages := newExePages()
	pages.drop()
	if err := daemon.Run(e.ctx, cfg, daemon.Options{AgentVersion: e.version, Logger: e.logger(), BeforeWrite: pages.drop, Pipelined: pipelinedProcs()}); err != nil {
		return e.fail(exitCode(err), "%v", err)
	}
	return ota.ExitOK
}

// committed says what mark-good committed: "committed 4.3.0 in slot A".
func committed(st ota.Status) string {
	if !st.BootedSlot.Valid() {
		return "booted slot marked good"
	}
	what := "the image"
	if s := st.Slots[st.BootedSlot]; s.Version != "" {
		what = s.Version
	} else if s.SHA256 != "" {
		what = "image " + short(s.SHA256)
	}
	return fmt.Sprintf("committed %s in slot %s", what, st.BootedSlot)
}

func cmdMark(e *env, args []string) int {
	// One line says what happened; -v brings the in-process agent's log back.
	e.logLevel = slog.LevelWarn
	_, cfg, code := e.setup(args, 0, nil)
	if cfg == nil {
		return code
	}
	good := args[0] == "mark-good"
	manual := cfg.Reboot.Policy == "manual"
	return e.operate(cfg, func(ctx context.Context, o operator) error {
		if good {
			return o.MarkGood(ctx)
		}
		return o.MarkBad(ctx)
	}, func(after ota.Status) (string, int) { // what the mark left: the slot committed, or the one to return to
		if good {
			return committed(after), ota.ExitOK
		}
		return markedBad(after, manual), ota.ExitOK
	})
}

// markedBad says what mark-bad did, from the status after it. A staged
// install dropped under the manual policy leaves the booted slot primary
// and unmarked: its slot is the one marked bad, and no reboot is needed
// (docs/contract/commands.md, otad mark-bad).
func markedBad(after ota.Status, manual bool) string {
	booted := after.BootedSlot
	if booted.Valid() && after.Slots[booted].Status != ota.SlotBad && after.Slots[booted.Other()].Status == ota.SlotBad {
		what := "the staged install"
		if r := after.LastResult; r != nil && r.ID != "" {
			what = "the staged install " + r.ID
		}
		return fmt.Sprintf("%s is dropped and slot %s marked bad; slot %s stays active (no reboot needed)", what, booted.Other(), booted)
	}
	if !manual {
		return "booted slot marked bad; rebooting"
	}
	// otad does not reboot under this policy: the operator must, or the
	// device keeps running the rejected slot.
	other := "the other slot"
	if booted.Valid() {
		other = "slot " + string(booted.Other())
	}
	return fmt.Sprintf("booted slot marked bad; %s is active\n"+
		"reboot.policy is manual: otad does not reboot. Reboot the device (systemctl reboot) to return to %s.", other, other)
}
