package operator

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/mosquittotest"
)

// A retained status or rollout state over the fleet-side read limit
// (docs/contract/mqtt.md, limits) is dropped unread; every reader says so,
// naming its topic and size, and none takes it for an empty (cleared) one:
// a 300 KB state used to hide its rollout from `rollout list`, and a 200 KB
// status showed its device with no state and no error.
func TestOversizedRetainedIsReported(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	c := mosquittotest.Client(t, b.URL, "evil")
	huge := make([]byte, 300_000)
	rand.Read(huge)
	for topic, payload := range map[string][]byte{
		"ota/devices/evil9/status": bytes.Repeat([]byte("a"), 200_000),
		"ota/rollouts/huge/state":  huge,
	} {
		if tok := c.Publish(topic, 1, true, payload); !tok.Wait() || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}

	for _, tt := range []struct {
		name  string
		args  []string
		check func(t *testing.T, stdout string)
	}{
		{"status --json", []string{"status", "--json", "--window", "0", "--timeout", "1s", "--device", "evil9"}, func(t *testing.T, stdout string) {
			var d struct {
				State     string `json:"state"`
				BadStatus string `json:"bad_status"`
			}
			if err := json.Unmarshal([]byte(stdout), &d); err != nil {
				t.Fatalf("%v: %q", err, stdout)
			}
			for _, w := range []string{"too_large", "ota/devices/evil9/status", "200000 bytes", "131072"} {
				if !strings.Contains(d.BadStatus, w) {
					t.Errorf("bad_status %q does not say %q", d.BadStatus, w)
				}
			}
		}},
		{"status --summary", []string{"status", "--summary", "--window", "0", "--timeout", "1s"}, func(t *testing.T, stdout string) {
			if !strings.Contains(stdout, "state:    1 bad\n") {
				t.Errorf("totals:\n%s", stdout)
			}
		}},
		{"rollout list --json", []string{"rollout", "list", "--json"}, func(t *testing.T, stdout string) {
			var list []listedRollout
			if err := json.Unmarshal([]byte(stdout), &list); err != nil {
				t.Fatalf("%v: %q", err, stdout)
			}
			if len(list) != 1 || list[0].Name != "huge" || list[0].State != nil ||
				!strings.Contains(list[0].Error, "300000 bytes, over the limit of 131072") || !strings.Contains(list[0].Error, "ota/rollouts/huge/state") {
				t.Errorf("list: %+v", list)
			}
		}},
		{"rollout list", []string{"rollout", "list"}, func(t *testing.T, stdout string) {
			if !regexp.MustCompile(`(?m)^huge\s+\(bad state: too_large: state of rollout huge on ota/rollouts/huge/state is 300000 bytes`).MatchString(stdout) {
				t.Errorf("table:\n%s", stdout)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, mustRun(t, append(tt.args, "--broker", b.URL)...).stdout)
		})
	}
}
