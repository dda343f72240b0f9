package operator

import (
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// Publishing an offer that already ended on its devices warns, naming them
// and what a retry needs; --clear --group clears the group's topic and
// every member's own desired topic (where a rollout leaves its offers).
func TestPublishWarnsAndClearsAGroup(t *testing.T) {
	r := startFleetRun(t, 4, 0)
	r.waitUp(t)
	first := mustRun(t, "publish", "--broker", r.urls[0], "--group", "fleet", r.offer)
	if strings.Contains(first.stderr, "warning") {
		t.Errorf("a new offer warned: %s", first.stderr)
	}
	ids := r.ids()
	waitFleet(t, fleetStatuses(t, r.urls[0]), "every device on 2.0", ids, func(st ota.Status) bool {
		return st.State == ota.Idle && st.Slots[st.BootedSlot].Version == "2.0"
	})
	again := mustRun(t, "publish", "--broker", r.urls[0], "--group", "fleet", r.offer)
	for _, want := range append([]string{"already ended for good on 4 of the 4 target devices", "sign the image again"}, ids...) {
		if !strings.Contains(again.stderr, want) {
			t.Errorf("publish again: no %q in\n%s", want, again.stderr)
		}
	}
	one := mustRun(t, "publish", "--broker", r.urls[0], "--device", ids[0], r.offer)
	if !strings.Contains(one.stderr, "already ended for good on 1 of the 1 target devices heard of ("+ids[0]+": success)") {
		t.Errorf("publish to one device: %s", one.stderr)
	}
	if got := mustRun(t, "publish", "--broker", r.urls[0], "--device", "gw-unknown", r.offer); strings.Contains(got.stderr, "warning") {
		t.Errorf("a device never heard of: %s", got.stderr)
	}

	for _, id := range ids[1:] { // as a rollout leaves them
		mustRun(t, "publish", "--broker", r.urls[0], "--device", id, r.offer)
	}
	clear := mustRun(t, "publish", "--broker", r.urls[0], "--group", "fleet", "--clear")
	if !strings.Contains(clear.stderr, "and on the desired topic of the 4 devices of group fleet") {
		t.Errorf("--clear --group: %s", clear.stderr)
	}
	for _, topic := range append([]string{"ota/groups/fleet/desired"}, desiredTopics(ids)...) {
		if got, ok := retainedOn(t, r.urls[0], topic); ok {
			t.Errorf("%s still holds %d bytes", topic, len(got))
		}
	}
}

func desiredTopics(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = "ota/devices/" + id + "/desired"
	}
	return out
}
