package device

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/device/config"
	"github.com/otad/otad/device/control"
	"github.com/otad/otad/device/daemon"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/slots"
)

func cmdStatus(e *env, args []string) int {
	var asJSON bool
	_, cfg, code := e.setup(args, 0, func(fs *flag.FlagSet) { fs.BoolVar(&asJSON, "json", false, "print the status snapshot as JSON") })
	if cfg == nil {
		return code
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	st, err := control.Client{Path: cfg.ControlSocket}.Status(ctx)
	offline := false // no daemon answered: the journal says
	if errors.Is(err, control.ErrNoDaemon) {
		// No daemon: the journal is replaced atomically, so reading it without
		// the lock is safe.
		s, _, jerr := agent.Journal{Dir: cfg.StateDir}.Load()
		if jerr != nil {
			return e.fail(ota.ExitFailure, "%v", jerr)
		}
		st, err = agent.ForOperator(agent.Snapshot(cfg.DeviceID, e.version, s, time.Now()), agent.Policy{RebootImmediately: cfg.Reboot.Policy != "manual"}), nil
		if s.Target != nil {
			// The window counts on with no daemon: read on this boot's clock.
			boot, _ := os.ReadFile(node.BootIDFile)
			st = agent.WithWindowLeft(st, s.Target.Confirming, cfg.Commit.Window.Duration, strings.TrimSpace(string(boot)), agent.SystemUptime{}.Uptime())
		}
		st.Groups = cfg.MQTT.Groups
		st.TrustVersion = e.offlineTrustVersion(cfg)
		offline = true
		if st.BootedSlot == "" && cfg.Bootloader.Type != "sim" {
			// Never run yet: the kernel command line still says (a sim
			// device's bootloader file is created by its first run, not here).
			st.BootedSlot, _ = slots.ReadBooted(cfg.Slots.Cmdline, cfg.Slots.Devices())
		}
	}
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(st)
		return ota.ExitOK
	}
	printStatus(e.stdout, st, cfg.Reboot.Policy == "manual", time.Now())
	if offline {
		fmt.Fprintf(e.stdout, "daemon:      not running (read from %s)\n", cfg.StateDir)
		if cfg.MQTT.Enabled() {
			fmt.Fprintf(e.stdout, "broker:      %s (not connected: otad is not running)\n", daemon.Brokers(cfg.MQTT))
		}
	}
	return ota.ExitOK
}

// offlineTrustVersion is the version of the root of trust the device
// holds, read as otad run would read it (the image's root or the newer one
// kept: each replaced atomically, so safe without the lock); 0, which the
// snapshot leaves out, when it trusts keys_dir. A root that does not read
// is said on stderr: the status is still worth printing.
func (e *env) offlineTrustVersion(cfg *config.Config) uint64 {
	if cfg.Trust.Root == "" {
		return 0
	}
	keys, err := node.LoadRoot(cfg.Trust.Root, cfg.StateDir, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		e.printErr(fmt.Sprintf("otad: %s: trust.root: %v (trust_version left out)", cfg.Path, err))
		return 0
	}
	return keys.Version()
}

// printStatus prints the status for a person; now is the clock the waiting
// download's times are read against.
func printStatus(w io.Writer, st ota.Status, manual bool, now time.Time) {
	fmt.Fprintf(w, "device:      %s\nstate:       %s\nbooted slot: %s\n", st.Device, daemon.StateWords(st, manual), orDash(string(st.BootedSlot)))
	if b := st.Broker; b != nil {
		link := "connected"
		if !b.Connected {
			link = "not connected (otad reconnects with backoff: journalctl -u otad -g mqtt)"
		}
		fmt.Fprintf(w, "broker:      %s %s\n", b.URL, link)
	}
	for _, n := range slices.Sorted(maps.Keys(st.Slots)) {
		s := st.Slots[n]
		fmt.Fprintf(w, "slot %s:      %-12s %-8s sha256 %s security_version %d\n", n, orDash(s.Version), orDash(string(s.Status)), short(s.SHA256), s.SecurityVersion)
	}
	if t := st.Target; t != nil {
		fmt.Fprintf(w, "target:      %s (%s) %d/%d bytes%s\n", t.ID, t.Version, t.BytesDone, t.BytesTotal, transfer(t.Transfer))
		if t.WindowLeftMS != nil {
			// What "wait for the window" means (docs/operating.md, Stuck states).
			left := (time.Duration(*t.WindowLeftMS) * time.Millisecond).Round(time.Second)
			fmt.Fprintf(w, "confirming:  since %s, %s of the commit window's running time left\n", t.ConfirmingSince.Format(time.RFC3339), left)
		}
		if t.Waiting != nil {
			// A download waiting out a network that is down is no ending
			// (docs/contract/installing.md, Networks that come and go).
			fmt.Fprintf(w, "waiting:     %s\n", waitLine(*t.Waiting, now))
		}
	}
	if p := st.Pending; p != nil {
		fmt.Fprintf(w, "pending:     %s (%s)\n", p.ID, p.Version)
	}
	if r := st.LastResult; r != nil {
		fmt.Fprintf(w, "last result: %s %s %s", r.ID, r.Result, r.Code)
		if r.Message != "" {
			fmt.Fprintf(w, " (%s)", r.Message)
		}
		fmt.Fprint(w, transfer(r.Transfer))
		if !r.Time.IsZero() {
			fmt.Fprintf(w, " at %s", r.Time.Format(time.RFC3339))
		}
		fmt.Fprintln(w)
	}
	if r := st.LastRefusal; r != nil {
		// Why the last offer that came in did nothing, when one was refused.
		fmt.Fprintf(w, "last refusal: %s %s (%s) at %s\n", orDash(r.ID), r.Code,
			strings.TrimPrefix(r.Message, string(r.Code)+": "), r.Time.Format(time.RFC3339))
	}
}

// transfer says where an install's bytes came from, when it moved any.
func transfer(t ota.Transfer) string {
	if t == (ota.Transfer{}) {
		return ""
	}
	s := fmt.Sprintf(", %d fetched, %d reused", t.BytesFetched, t.BytesReused)
	if t.BytesDelta > 0 {
		s += fmt.Sprintf(", %d rebuilt from deltas", t.BytesDelta)
	}
	if t.Path != "" {
		s += " (" + string(t.Path) + ")"
	}
	return s
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return orDash(sha)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
