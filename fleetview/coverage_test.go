package fleetview

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/ota"
)

// member is a status of dev in groups, as a device publishes it.
func member(dev string, seq uint64, groups ...string) []byte {
	b, _ := json.Marshal(ota.Status{Device: dev, Seq: seq, BootID: "b", State: ota.Idle, Groups: groups})
	return b
}

func TestCoverage(t *testing.T) {
	st := func(dev string, retained bool, groups ...string) mqtt.Message {
		return mqtt.Message{Topic: "ota/devices/" + dev + "/status", Payload: member(dev, 1, groups...), Retained: retained}
	}
	tests := []struct {
		name   string
		window time.Duration // 0: no report request
		group  string
		msgs   []mqtt.Message
		want   Coverage
		text   string
	}{
		{"no request", 0, "", []mqtt.Message{st("a", true), st("b", true)},
			Coverage{Devices: 2, RetainedOnly: 2, Retained: 2},
			"2 devices, from retained statuses only (no report request sent); offline devices may be missing: a broker may deliver only part of the saved statuses"},
		{"every retained status arrived, some answered", 3 * time.Second, "", []mqtt.Message{
			st("a", true), st("b", true), st("c", true), st("a", false), st("b", false),
		}, Coverage{Devices: 3, Live: 2, RetainedOnly: 1, Retained: 3, Window: 3 * time.Second},
			"3 devices (2 answered the report request within 3s, 1 from retained only)"},
		{"no retained delivery to a wildcard (RabbitMQ)", 10 * time.Second, "", []mqtt.Message{
			st("a", false), st("b", false),
		}, Coverage{Devices: 2, Live: 2, Missed: 2, Window: 10 * time.Second},
			"2 devices (2 answered the report request within 10s, 0 from retained only); offline devices may be missing: " +
				"the broker did not deliver the saved status of 2 of the 2 devices that answered, so it may not have delivered those of devices that are offline now"},
		{"an answer before its retained copy is not a miss", 3 * time.Second, "", []mqtt.Message{
			st("a", false), {Topic: "ota/devices/a/status", Payload: member("a", 0), Retained: true},
		}, Coverage{Devices: 1, Live: 1, Retained: 1, Window: 3 * time.Second}, ""},
		{"a window below the devices' bound", 100 * time.Millisecond, "", nil,
			Coverage{Window: mqtt.MinReportWindow}, "0 devices (0 answered the report request within 1s, 0 from retained only)"},
		{"group request counts the group", 3 * time.Second, "eu", []mqtt.Message{
			st("a", false, "eu"), st("b", true, "eu", "canary"), st("c", false, "us"),
			{Topic: "ota/devices/d/online", Payload: []byte(`{"online":true}`), Retained: true},
		}, Coverage{Devices: 2, Live: 1, RetainedOnly: 1, Retained: 1, Missed: 1, Window: 3 * time.Second, Group: "eu"}, ""},
		{"devices without a valid status", 3 * time.Second, "", []mqtt.Message{
			st("a", true), {Topic: "ota/devices/b/status", Payload: []byte("{"), Retained: true},
			{Topic: "ota/devices/c/online", Payload: []byte(`{"online":false}`), Retained: true}, // no device without a status
		}, Coverage{Devices: 2, RetainedOnly: 1, Retained: 1, NoStatus: 1, Window: 3 * time.Second},
			"2 devices (0 answered the report request within 3s, 1 from retained only, 1 without a valid status)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := New("ota")
			if tt.window > 0 {
				r := mqtt.NewReportRequest(tt.window)
				v.asked = &asked{at: v.now(), window: r.Window(), group: tt.group}
			}
			for _, m := range tt.msgs {
				v.ObserveMessage(m)
			}
			got := v.Coverage()
			if got != tt.want {
				t.Fatalf("coverage %+v, want %+v", got, tt.want)
			}
			if got.Incomplete() != (tt.window == 0 || tt.want.Missed > 0) {
				t.Errorf("Incomplete() = %v", got.Incomplete())
			}
			if tt.text != "" && got.String() != tt.text {
				t.Errorf("String() = %q\nwant        %q", got, tt.text)
			}
		})
	}
}

// Coverage is counted from outside input: whatever arrives, the counts add up.
func FuzzCoverage(f *testing.F) {
	f.Add("a", string(member("a", 1, "eu")), true, "eu")
	f.Add("a", `{"device":"a","groups":null}`, false, "")
	f.Fuzz(func(t *testing.T, dev, payload string, retained bool, group string) {
		v := New("ota")
		v.asked = &asked{window: time.Second, group: group}
		v.ObserveMessage(mqtt.Message{Topic: "ota/devices/" + dev + "/status", Payload: []byte(payload), Retained: retained})
		c := v.Coverage()
		if c.Devices != c.Live+c.RetainedOnly+c.NoStatus || c.Missed > c.Live || c.Devices > 1 {
			t.Fatalf("coverage %+v does not add up", c)
		}
		_ = fmt.Sprint(c)
	})
}

// A view that runs on (status --watch, a rollout) hears devices that come
// online after the answers were due: they are live, not missed by retained
// delivery, and do not make the view incomplete.
func TestCoverageOfADeviceThatCameOnlineLater(t *testing.T) {
	v := New("ota")
	now := time.Now()
	v.now = func() time.Time { return now }
	v.asked = &asked{at: now.Add(-time.Minute), window: 3 * time.Second}
	v.ObserveMessage(mqtt.Message{Topic: "ota/devices/a/status", Payload: member("a", 1), Retained: true})
	v.ObserveMessage(mqtt.Message{Topic: "ota/devices/a/status", Payload: member("a", 2)})
	v.ObserveMessage(mqtt.Message{Topic: "ota/devices/new/status", Payload: member("new", 1)})
	if c := v.Coverage(); c != (Coverage{Devices: 2, Live: 2, Retained: 1, Window: 3 * time.Second}) || c.Incomplete() {
		t.Fatalf("coverage %+v (incomplete %v), want 2 live devices and none missed", c, c.Incomplete())
	}
}

// A healthy fleet started while the view listened (the dashboard first,
// then six devices): each announces itself online live and answers within
// the window, and one offline device is known from its retained status.
// No device is missing, so the view is complete; a device online all
// along whose retained status never arrived still makes it incomplete.
func TestCoverageOfAFleetStartedWhileListening(t *testing.T) {
	v := New("ota")
	now := time.Now()
	v.now = func() time.Time { return now }
	v.asked = &asked{at: now, window: 3 * time.Second}
	v.ObserveMessage(mqtt.Message{Topic: "ota/devices/off/status", Payload: member("off", 1), Retained: true})
	for i := range 5 {
		id := fmt.Sprint("gw-", i)
		v.ObserveMessage(mqtt.Message{Topic: "ota/devices/" + id + "/online", Payload: []byte(`{"online":true}`)})
		v.ObserveMessage(mqtt.Message{Topic: "ota/devices/" + id + "/status", Payload: member(id, 1)})
	}
	c := v.Coverage()
	if c != (Coverage{Devices: 6, Live: 5, RetainedOnly: 1, Retained: 1, Window: 3 * time.Second}) || c.Incomplete() {
		t.Fatalf("coverage %+v (incomplete %v): %s", c, c.Incomplete(), c)
	}
	if s := c.String(); strings.Contains(s, "missing") {
		t.Errorf("a complete view says %q", s)
	}
	// Online before the view subscribed (its presence retained), its
	// status never delivered retained: the broker lost it.
	v.ObserveMessage(mqtt.Message{Topic: "ota/devices/old/online", Payload: []byte(`{"online":true}`), Retained: true})
	v.ObserveMessage(mqtt.Message{Topic: "ota/devices/old/status", Payload: member("old", 3)})
	if c := v.Coverage(); c.Missed != 1 || !c.Incomplete() || !strings.Contains(c.String(), "offline devices may be missing: the broker did not deliver the saved status of 1 of the 6 devices") {
		t.Errorf("a lost retained status: %+v %s", c, c)
	}
}

// The answers to a report request that came faster than half a broker's
// queue for a client a second, with retained statuses that do not make up
// for the dropped ones, name the setting and the window that fits; a view
// whose retained statuses all arrived, or a broker without a limit, says
// nothing of it.
func TestCoverageOverflow(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     Coverage
		queue int
		want  string // "" : nothing said
	}{
		{"RabbitMQ's answers only, too fast for a queue of 1,000", Coverage{Devices: 20000, Live: 20000, Missed: 20000, Window: 3 * time.Second}, 1000,
			"20000 answers within 3s are about 6667 a second to this one connection, over the 500 a second a broker queue of 1000 messages"},
		{"the window that fits", Coverage{Devices: 20000, Live: 20000, Window: 3 * time.Second}, 1000, "ask with --window 40s or more"},
		{"retained statuses missed (EMQX)", Coverage{Devices: 5000, Live: 100, Retained: 4000, Missed: 10, Window: 5 * time.Second}, 1000, "max_queued_messages"},
		{"every retained status arrived (Mosquitto)", Coverage{Devices: 100000, Live: 1000, Retained: 100000, Window: 3 * time.Second}, 1000, ""},
		{"within the queue", Coverage{Devices: 1500, Live: 1500, Missed: 1500, Window: 3 * time.Second}, 1000, ""},
		{"no limit stated", Coverage{Devices: 100000, Live: 100000, Missed: 100000, Window: 3 * time.Second}, 0, ""},
		{"no request", Coverage{Devices: 100000, Retained: 0}, 1000, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.c.Overflow(tc.queue)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("Overflow(%d) = %q, want %q", tc.queue, got, tc.want)
			}
			if say := tc.c.Say(tc.queue); !strings.HasPrefix(say, tc.c.String()) || !strings.Contains(say, got) {
				t.Errorf("Say = %q", say)
			}
		})
	}
}
