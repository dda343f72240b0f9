package device

import (
	"fmt"
	"strings"
	"time"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// cmdInfo is `otad info FILE`: what an offer is, for which devices, and
// whether this device would install it and why not, judged by the checks and
// the agent's own step on the journal (node.Inspect) without fetching or
// writing anything and without the state lock. Exit 0 when it would be
// installed (or waits as pending, or the device is already up to date), 3
// with the code when a check refuses it, 1 when it ended before.
func cmdInfo(e *env, args []string) int {
	pos, cfg, code := e.setup(args, 1, nil)
	if cfg == nil {
		return code
	}
	file := pos[0]
	raw, err := verify.ReadEnvelopeFile(file)
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	s, _, err := agent.Journal{Dir: cfg.StateDir}.Load() // replaced atomically: safe without the lock
	if err != nil {
		return e.fail(ota.ExitFailure, "%v", err)
	}
	booted, err := node.BootedSlot(cfg)
	if err != nil {
		return e.fail(exitCode(err), "%v", err)
	}
	printOffer(e, raw)
	v := node.Inspect(cfg, s, booted, raw)
	if v.Refused != nil {
		e.printErr(fmt.Sprintf("otad: %s: would be refused: %v", file, v.Refused))
		if ota.CodeOf(v.Refused) == "" {
			return exitCode(v.Refused) // the device's own state (the trust directory), not the offer
		}
		return ota.ExitRefused
	}
	for _, fx := range v.Effects {
		if si, ok := fx.(agent.StartInstall); ok {
			fmt.Fprintf(e.stdout, "verdict:   would install into slot %s (booted %s)\n", si.Target.Slot, booted)
			return ota.ExitOK
		}
	}
	if p := v.State.Pending; p != nil && p.Key() == v.Target.Key() {
		phase := v.State.Phase
		if phase == ota.Rebooting && cfg.Reboot.Policy == "manual" {
			phase = ota.Staged // waits for the operator's reboot (agent.ForOperator)
		}
		fmt.Fprintf(e.stdout, "verdict:   would wait as pending until %s is settled (%s)\n", v.State.Target.ID, phase)
		return ota.ExitOK
	}
	for _, fx := range v.Effects {
		if em, ok := fx.(agent.Emit); ok {
			switch ev := em.Event; {
			case ev.Result == ota.ResultUpToDate:
				fmt.Fprintf(e.stdout, "verdict:   up to date: %s\n", ev.Message)
				return ota.ExitOK
			case ev.Message != "":
				fmt.Fprintf(e.stdout, "verdict:   would not be installed: %s\n", ev.Message)
				if strings.Contains(ev.Message, "is the install in progress") {
					return ota.ExitOK
				}
				return ota.ExitFailure
			}
		}
	}
	fmt.Fprintln(e.stdout, "verdict:   would not be installed")
	return ota.ExitFailure
}

// printOffer prints what the envelope says, signed or not: the checks say
// whether to believe it.
func printOffer(e *env, raw []byte) {
	env, err := verify.ParseEnvelope(raw)
	if err != nil {
		return
	}
	m, err := verify.ParseManifest(env.Manifest)
	if err != nil {
		return
	}
	fmt.Fprintf(e.stdout, "offer:     %s, version %s, security_version %d, %d signature(s)\n", m.ID, m.Version, m.SecurityVersion, len(env.Signatures))
	fmt.Fprintf(e.stdout, "issued:    %s, expires %s\n", m.IssuedAt.Format(time.RFC3339), m.ExpiresAt.Format(time.RFC3339))
	devices := "any device"
	if len(m.Devices) > 0 {
		devices = strings.Join(m.Devices, ", ")
	}
	fmt.Fprintf(e.stdout, "for:       compatible %s; %s\n", strings.Join(m.Compatible, ", "), devices)
	p := m.Payload
	if c := p.Chunks; c != nil {
		fmt.Fprintf(e.stdout, "payload:   %s, sha256 %s, chunked: %d chunks of %s from %s and %s\n", size(p.Size), short(p.SHA256), c.Count, size(c.Size), c.IndexURL, c.StoreURL)
		return
	}
	comp := string(p.Compression)
	if comp == "" {
		comp = "none"
	}
	fmt.Fprintf(e.stdout, "payload:   %s, sha256 %s, compression %s, from %s\n", size(p.Size), short(p.SHA256), comp, p.URL)
}
