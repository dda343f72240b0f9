package mqtt

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
)

// Devices answer a report request by publishing their status again, live
// (not as a retained delivery), within the window; a group's request only
// reaches that group; retained and malformed requests get no answer.
func TestAnswersReportRequests(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{})
	cfg := Config{Broker: b.URL}
	canary := dial(t, Config{Broker: b.URL, DeviceID: "gw-1", Groups: []string{"canary"}}, newOffers())
	other := dial(t, Config{Broker: b.URL, DeviceID: "gw-2"}, newOffers())
	canary.PublishStatus([]byte(`{"device":"gw-1"}`))
	other.PublishStatus([]byte(`{"device":"gw-2"}`))
	const st1, st2 = "ota/devices/gw-1/status", "ota/devices/gw-2/status"
	statuses := observe(t, cfg, "", "ota/devices/+/status")
	all(t, statuses, map[string]string{st1: `{"device":"gw-1"}`, st2: `{"device":"gw-2"}`}, 10*time.Second)

	live := func(m received) bool { return !m.retained }
	sent := time.Now()
	mosquittoPub(t, b, "-q", "1", "-t", "ota/fleet/report", "-m", `{"id":"r-1","window_ms":1500}`)
	for answered := map[string]bool{}; len(answered) < 2; {
		select {
		case m := <-statuses:
			if !m.retained { // observe's second SUBSCRIBE may deliver the retained ones again
				answered[m.topic] = true
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("answers from %v only", answered)
		}
	}
	if took := time.Since(sent); took > 3*time.Second {
		t.Errorf("answers took %v for a 1.5s window", took)
	}

	mosquittoPub(t, b, "-q", "1", "-t", "ota/groups/canary/report", "-m", `{"id":"r-2","window_ms":1000}`)
	nextMatching(t, statuses, st1, 5*time.Second, live, " (the group's answer)")
	none(t, statuses, st2, 2*time.Second)

	for _, req := range []string{`{"id":"r/4","window_ms":1000}`, `{"window_ms":"now"}`, `[]`} {
		mosquittoPub(t, b, "-q", "1", "-t", "ota/fleet/report", "-m", req)
	}
	none(t, statuses, st1, 2500*time.Millisecond)

	// A retained request reaches connected devices as a live message (MQTT
	// clears the flag on an established subscription): they answer. A
	// device that connects later gets it flagged retained, stale: it only
	// publishes its status as it does on every connect.
	mosquittoPub(t, b, "-r", "-q", "1", "-t", "ota/fleet/report", "-m", `{"id":"r-5","window_ms":1000}`)
	t.Cleanup(func() { mosquittoPub(t, b, "-r", "-q", "1", "-t", "ota/fleet/report", "-n") })
	nextMatching(t, statuses, st1, 5*time.Second, live, " (the answer to a fresh retained request)")
	var logs testtool.Buffer
	late := dial(t, Config{Broker: b.URL, DeviceID: "gw-3", Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, newOffers())
	late.PublishStatus([]byte(`{"device":"gw-3"}`))
	nextMatching(t, statuses, "ota/devices/gw-3/status", 5*time.Second, live, " (the status on connect)")
	// From the device's log, not by the statuses that follow: under load the
	// observer was once handed the status on connect twice, from a device that
	// logged one connect and no answer (make test).
	waitFor(t, "the retained request ignored", 5*time.Second, func() bool {
		return strings.Contains(logs.String(), `msg="mqtt: retained report request ignored"`)
	})
	time.Sleep(time.Second) // a live delivery of the request after the retained one would be logged by now
	if l := logs.String(); strings.Contains(l, `msg="mqtt: report request" `) {
		t.Fatalf("the late device took the retained request as a fresh one:\n%s", l)
	}
}
