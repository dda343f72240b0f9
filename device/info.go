package device

import (
	"encoding/json"
	"errors"
	"flag"
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
// with the code when a check refuses it, 1 when it ended before. --json
// prints the same as one object (docs/contract/commands.md).
func cmdInfo(e *env, args []string) int {
	var asJSON bool
	pos, cfg, code := e.setup(args, 1, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the offer and the verdict as one JSON object")
	})
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
	r := infoReport{Offer: offerOf(raw)}
	r.verdict(node.Inspect(cfg, s, booted, raw), booted, cfg.Reboot.Policy == "manual")
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return e.fail(ota.ExitFailure, "%v", err)
		}
		return r.Exit
	}
	printOffer(e, r.Offer)
	if r.Verdict == "refused" {
		e.printErr(fmt.Sprintf("otad: %s: would be refused: %s", file, r.Message))
		return r.Exit
	}
	fmt.Fprintf(e.stdout, "verdict:   %s\n", r.Message)
	return r.Exit
}

// infoReport is what `otad info` says of an offer.
type infoReport struct {
	Offer *offerInfo `json:"offer,omitempty"` // nil: the envelope or its manifest does not parse
	// Verdict is one of install, pending, up_to_date, in_progress, ended,
	// refused; Message says it in words.
	Verdict string   `json:"verdict"`
	Code    ota.Code `json:"code,omitempty"` // the refusal's code
	Slot    ota.Slot `json:"slot,omitempty"` // the slot an install would write
	Message string   `json:"message"`
	Exit    int      `json:"exit"`
}

// verdict fills in what the checks and the agent's step decided.
func (r *infoReport) verdict(v node.Verdict, booted ota.Slot, manual bool) {
	set := func(verdict, msg string, exit int) { r.Verdict, r.Message, r.Exit = verdict, msg, exit }
	if v.Refused != nil {
		// The device's own config (the trust directory, a root of trust
		// that does not anchor) refuses before any offer is judged: exit 2
		// as for otad install, even when the root's refusal carries a code
		// (docs/contract/commands.md), and no offer code.
		var cr *node.Refusal
		if errors.As(v.Refused, &cr) {
			set("refused", v.Refused.Error(), cr.Code)
			return
		}
		r.Code = ota.CodeOf(v.Refused)
		exit := ota.ExitRefused
		if r.Code == "" {
			exit = exitCode(v.Refused)
		}
		set("refused", v.Refused.Error(), exit)
		return
	}
	for _, fx := range v.Effects {
		if si, ok := fx.(agent.StartInstall); ok {
			r.Slot = si.Target.Slot
			set("install", fmt.Sprintf("would install into slot %s (booted %s)", si.Target.Slot, booted), ota.ExitOK)
			return
		}
	}
	if p := v.State.Pending; p != nil && p.Key() == v.Target.Key() {
		phase := v.State.Phase
		if phase == ota.Rebooting && manual {
			phase = ota.Staged // waits for the operator's reboot (agent.ForOperator)
		}
		set("pending", fmt.Sprintf("would wait as pending until %s is settled (%s)", v.State.Target.ID, phase), ota.ExitOK)
		return
	}
	for _, fx := range v.Effects {
		if em, ok := fx.(agent.Emit); ok {
			switch ev := em.Event; {
			case ev.Result == ota.ResultUpToDate:
				set("up_to_date", "up to date: "+ev.Message, ota.ExitOK)
				return
			case ev.Message != "" && strings.Contains(ev.Message, "is the install in progress"):
				set("in_progress", "would not be installed: "+ev.Message, ota.ExitOK)
				return
			case ev.Message != "":
				set("ended", "would not be installed: "+ev.Message, ota.ExitFailure)
				return
			}
		}
	}
	set("ended", "would not be installed", ota.ExitFailure)
}

// offerInfo is what an envelope says, signed or not: the checks say whether
// to believe it.
type offerInfo struct {
	ID              string         `json:"id"`
	Version         string         `json:"version"`
	SecurityVersion uint64         `json:"security_version"`
	Signatures      int            `json:"signatures"`
	IssuedAt        time.Time      `json:"issued_at"`
	ExpiresAt       time.Time      `json:"expires_at"`
	Compatible      []string       `json:"compatible"`
	Devices         []string       `json:"devices,omitempty"`
	Payload         verify.Payload `json:"payload"`
}

func offerOf(raw []byte) *offerInfo {
	env, err := verify.ParseEnvelope(raw)
	if err != nil {
		return nil
	}
	m, err := verify.ParseManifest(env.Manifest)
	if err != nil {
		return nil
	}
	return &offerInfo{ID: m.ID, Version: m.Version, SecurityVersion: m.SecurityVersion, Signatures: len(env.Signatures),
		IssuedAt: m.IssuedAt, ExpiresAt: m.ExpiresAt, Compatible: m.Compatible, Devices: m.Devices, Payload: m.Payload}
}

// printOffer prints what the envelope says.
func printOffer(e *env, m *offerInfo) {
	if m == nil {
		return
	}
	fmt.Fprintf(e.stdout, "offer:     %s, version %s, security_version %d, %d signature(s)\n", m.ID, m.Version, m.SecurityVersion, m.Signatures)
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
