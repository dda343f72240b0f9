package fleetview

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Status snapshots as devices publish them (docs/contract/mqtt.md).
const statusGW1 = `{"device": "gw-1", "seq": 913, "boot_id": "b", "state": "downloading",
 "booted_slot": "A",
 "slots": {"A": {"version": "4.1.0", "sha256": "aa", "security_version": 6},
           "B": {"version": "", "sha256": "", "security_version": 0}},
 "target": {"id": "rel-42", "version": "4.2.0", "sha256": "bb", "bytes_done": 123, "bytes_total": 456},
 "last_result": {"id": "rel-41", "result": "failed", "code": "hash_mismatch", "message": "m"},
 "agent_version": "0.1.0", "time": "2026-11-29T10:00:00Z"}`

const statusGW2 = `{"device":"gw-2","seq":7,"state":"idle","booted_slot":"B",
 "slots":{"A":{"version":"4.1.0"},"B":{"version":"4.2.0"}},
 "last_result":{"id":"rel-42","result":"success"}}`

const statusGW3 = `{"device":"gw-3","seq":9,"state":"idle","booted_slot":"A","groups":["canary"],
 "slots":{"A":{"version":"1.0.0","status":"good"},"B":{"version":"2.1.0","status":"bad"}},
 "last_result":{"id":"rel-21","result":"failed","code":"health_check_failed"}}`

func TestRenderFleet(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	f := New("ota")
	f.now = func() time.Time { return now }
	for _, m := range []struct{ topic, payload string }{
		{"ota/devices/gw-1/status", statusGW1},
		{"ota/devices/gw-1/progress", `{"id":"rel-42","bytes_done":456,"bytes_total":456,"bytes_per_second":2048}`},
		{"ota/devices/gw-2/status", statusGW2},
		{"ota/devices/gw-2/status", ""}, // cleared
		{"ota/devices/gw-2/online", `{"online":false}`},
		{"ota/devices/evil\x1b[2J/status", `{"device":"evil\u001b[2J","state":"x\ty"}`}, // an ID no device may have: a bad status
		{"ota/devices/gw-0/status", `{"device":"gw-0","state":"x\ty"}`},
		{"ota/groups/canary/desired", "ignored"},
		{"ota/devices/gw-3/status", statusGW3},
		{"ota/devices/gw-3/online", `{"online":true}`},
		{"ota/devices/gw-9/progress", "not json"},
	} {
		f.Observe(m.topic, []byte(m.payload))
	}
	var buf bytes.Buffer
	if err := f.Render(&buf, Filter{}, true); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`^DEVICE\s+ONLINE\s+STATE\s+RUNNING\s+BOOTED\s+SLOT A\s+SLOT B\s+TARGET\s+LAST RESULT\s+SEQ\s+PROGRESS$`,
		`^evil\?\[2J\s+\?\s+\(bad status\)\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s*$`,
		`^gw-0\s+\?\s+x\?y\s+-\s+-\s+-\s+-\s+-\s+-\s+0\s*$`,
		// rel-41's failure is not rel-42's, which is installing: not shown.
		`^gw-1\s+\?\s+downloading\s+4\.1\.0\s+A\s+4\.1\.0\s+-\s+4\.2\.0 100%\s+-\s+913\s+\[#{20}\] 100% 2\.0 KiB/s$`,
		`^gw-2\s+no\s+\?\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s*$`,
		// Back on A after B failed its health check: B's image is bad.
		`^gw-3\s+yes\s+idle\s+1\.0\.0\s+A\s+1\.0\.0 \(good\)\s+2\.1\.0 \(bad\)\s+-\s+failed/health_check_failed\s+9\s*$`,
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("line %d = %q, want /%s/", i, lines[i], re)
		}
	}

	// Stale progress is not shown.
	now = now.Add(time.Minute)
	buf.Reset()
	if err := f.Render(&buf, Filter{}, true); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "KiB/s") || !strings.Contains(buf.String(), "4.2.0 26%") {
		t.Errorf("stale progress still shown:\n%s", buf.String())
	}
}

func TestProgressBar(t *testing.T) {
	for _, tt := range []struct {
		done, total int64
		rate        float64
		want        string
	}{
		{0, 100, 0, "[....................]   0%"},
		{50, 100, 12.3 * 1024 * 1024, "[##########..........]  50% 12.3 MiB/s"},
		{200, 100, 10, "[####################] 100% 10.0 B/s"},
		{5, 0, 0, "[....................]   0%"},
		{-5, 100, 0, "[....................]   0%"},
	} {
		if got := progressBar(tt.done, tt.total, tt.rate); got != tt.want {
			t.Errorf("progressBar(%d, %d, %v) = %q, want %q", tt.done, tt.total, tt.rate, got, tt.want)
		}
	}
}

func FuzzDecodeStatus(f *testing.F) {
	f.Add([]byte(statusGW1))
	f.Add([]byte(statusGW2))
	f.Add([]byte(`{"seq":-1}`))
	f.Add([]byte(`{"slots":{"A":null},"target":null}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeStatus(b)
		if err != nil {
			return
		}
		// Whatever decodes must render without panicking, and on one line.
		fl := New("ota")
		fl.devices["d"] = &record{status: s}
		var buf bytes.Buffer
		if err := fl.Render(&buf, Filter{}, true); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(buf.String(), "\n"); n != 2 {
			t.Fatalf("%d lines for one device:\n%s", n, buf.String())
		}
	})
}
