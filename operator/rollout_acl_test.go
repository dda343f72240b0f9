package operator

import (
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// rolloutACL is docs/brokers.md's Mosquitto ACL in the shape a test can
// run without certificates: devices by client ID (%c for the certificate's
// %u), the test's fleet (anonymous) writing every device's status, and
// the operators' user alone under ota/rollouts/.
const rolloutACL = `pattern read  ota/devices/%c/desired
pattern write ota/devices/%c/status
pattern read  ota/fleet/report
topic readwrite ota/devices/#
topic read ota/groups/#

user otactl
topic readwrite ota/#
`

// A rollout on a real Mosquitto with the ACL of docs/brokers.md: a device
// that writes a lease, a halt and a pause under ota/rollouts/ is refused by
// the broker (nothing arrives), and the rollout, run as the operators'
// user, finishes.
func TestRolloutUnderTheBrokersACL(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true, ACL: rolloutACL})
	plan, id, sum := rolloutPlan(t, "acl", "1s", 50)
	startProtoFleet(t, b.URL, 20, id, sum, func(int) bool { return false })

	// A device tries to steer the rollout before it starts.
	dev := mosquittotest.Client(t, b.URL, "gw-007")
	forged := rollout.State{Name: "acl", WaveCount: 3, Lease: &rollout.Lease{Holder: "gw-007", Epoch: 1 << 20, TTLMS: 600000},
		Halted: &rollout.Mark{Reason: "forged"}}
	fb, _ := forged.Encode()
	for topic, payload := range map[string][]byte{
		"ota/rollouts/acl/state":   fb,
		"ota/rollouts/acl/control": []byte(`{"id":"x","op":"pause"}`),
	} {
		if tok := dev.Publish(topic, 1, true, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", topic, tok.Error())
		}
	}
	ops := mosquittotest.Client(t, b.URL, "ops-reader", func(o *paho.ClientOptions) { o.SetUsername("otactl") })
	arrived := make(chan string, 4)
	mosquittotest.Subscribe(t, ops, "ota/rollouts/#", func(_ paho.Client, m paho.Message) {
		if m.Retained() {
			arrived <- m.Topic()
		}
	})
	select {
	case topic := <-arrived:
		t.Fatalf("the broker kept a device's message on %s", topic)
	case <-time.After(time.Second):
	}

	r := otactl(t, "rollout", "start", "--broker", b.URL, "--username", "otactl", "--settle", "2s", "--tick", "200ms", plan)
	if r.code != ota.ExitOK || strings.Contains(r.stderr, "forged") {
		t.Fatalf("exit %d:\n%s", r.code, tail(r.stderr))
	}
	st := otactl(t, "rollout", "status", "--broker", b.URL, "--username", "otactl", "--json", "acl")
	if st.code != ota.ExitOK || !strings.Contains(st.stdout, `"state": "finished"`) {
		t.Fatalf("status: exit %d\n%s%s", st.code, st.stdout, st.stderr)
	}
}
