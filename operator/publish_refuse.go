package operator

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// wouldRefuse warns, a line each, about target devices that would refuse
// the offer (docs/contract/checks.md): every one when it expired or is
// not yet valid, those whose compatible string (in their status) it does
// not list, those its devices list leaves out, and those whose status says
// they refused this very offer already (its manifest's digest in
// last_refusal: too big for the slot, …). A refused offer changes nothing
// on a device, so without a word here it would go unseen. What a status
// cannot tell (the slot's size, the journal's floors) the devices check.
func wouldRefuse(envelope []byte, statuses map[string]ota.Status, now time.Time) []string {
	env, err := verify.ParseEnvelope(envelope)
	if err != nil {
		return nil
	}
	m, err := verify.ParseManifest(env.Manifest)
	if err != nil {
		return nil
	}
	digest := verify.EnvelopeDigest(envelope)
	var out []string
	switch {
	case !m.ExpiresAt.After(now):
		out = append(out, fmt.Sprintf("warning: offer %s expired at %s: every device refuses it (expired). Sign it again with a later --issued-at or a longer --expires.",
			m.ID, m.ExpiresAt.UTC().Format(time.RFC3339)))
	case m.IssuedAt.After(now.Add(verify.DefaultSkewAllowance)):
		out = append(out, fmt.Sprintf("warning: offer %s is issued at %s, more than %s ahead of this clock: devices refuse it (not_yet_valid).",
			m.ID, m.IssuedAt.UTC().Format(time.RFC3339), verify.DefaultSkewAllowance))
	}
	refused := map[string][]string{} // code → devices
	for id, st := range statuses {
		switch r := st.LastRefusal; {
		case st.Compatible != "" && !slices.Contains(m.Compatible, st.Compatible):
			refused[string(ota.CodeIncompatible)] = append(refused[string(ota.CodeIncompatible)], id)
		case m.Devices != nil && !slices.Contains(m.Devices, id):
			refused[string(ota.CodeNotForThisDevice)] = append(refused[string(ota.CodeNotForThisDevice)], id)
		case r != nil && digest != "" && r.ManifestSHA256 == digest:
			refused[string(r.Code)] = append(refused[string(r.Code)], id)
		}
	}
	codes := make([]string, 0, len(refused))
	for c := range refused {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	for _, c := range codes {
		ids := refused[c]
		sort.Strings(ids)
		why := "refused it already"
		switch c {
		case string(ota.CodeIncompatible):
			why = "have a compatible string it does not list (" + strings.Join(m.Compatible, ", ") + ") and refuse it"
		case string(ota.CodeNotForThisDevice):
			why = "are not in its devices list and refuse it"
		}
		out = append(out, fmt.Sprintf("warning: %d of the %d target devices heard of %s (%s): %s", len(ids), len(statuses), why, c, shortList(ids)))
	}
	return out
}

// shortList is the first ten of ids, and how many more.
func shortList(ids []string) string {
	if len(ids) > 10 {
		return strings.Join(ids[:10], ", ") + fmt.Sprintf(" and %d more", len(ids)-10)
	}
	return strings.Join(ids, ", ")
}
