package rollout

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrGroupBusy: another rollout of the plan's group runs now (exit 4).
var ErrGroupBusy = errors.New("group in another rollout")

// SharedGroup judges the other rollouts whose states the broker retains
// against plan p about to start (docs/contract/rollouts.md, one rollout
// per group). Two rollouts of one group each publish their offer to the
// same devices' desired topics, and a device takes the one that came last:
// they would overwrite each other for as long as both offer. So another
// rollout of the group that has not ended and that a controller runs now
// (its lease live, not halted) refuses the start (ErrGroupBusy); one that
// has not ended but offers nothing now (halted, or no controller runs it)
// is a warning, as it offers again once resumed or started again. Ended
// rollouts (finished, aborted) and p's own state are passed over.
func SharedGroup(p *Plan, others []State, now time.Time) (warnings []string, err error) {
	var busy []string
	for _, s := range others {
		if s.Name == p.Name || s.Group != p.Group || s.Terminal() {
			continue
		}
		what := fmt.Sprintf("rollout %s (%s, wave %d of %d, offer %s)", s.Name, s.Phase, s.Wave, s.WaveCount, s.Offer.ID)
		switch {
		case s.Halted == nil && s.Lease.Live(now):
			busy = append(busy, fmt.Sprintf("%s, which %s runs now (lease renewed %s)", what, s.Lease.Holder, s.Lease.Renewed.UTC().Format(time.RFC3339)))
		case s.Halted != nil:
			warnings = append(warnings, fmt.Sprintf("group %s is also in %s: its offer stays on the devices it reached, and a resume offers it again beside this rollout's; if this rollout replaces it, abort it (otactl rollout abort --withdraw %s)",
				p.Group, what, s.Name))
		default:
			warnings = append(warnings, fmt.Sprintf("group %s is also in %s, which no controller runs now: once started again it offers to the same devices as this rollout, and each device takes the offer published last; if this rollout replaces it, abort it (otactl rollout abort --withdraw %s)",
				p.Group, what, s.Name))
		}
	}
	if len(busy) > 0 {
		slices.Sort(busy)
		return warnings, fmt.Errorf("%w: rollout %s: group %s is in %s: two rollouts of one group publish their offers to the same devices' desired topics, and each device takes the one published last; let it finish, or abort it first (otactl rollout abort [--withdraw] NAME)",
			ErrGroupBusy, p.Name, p.Group, strings.Join(busy, "; and in "))
	}
	return warnings, nil
}
