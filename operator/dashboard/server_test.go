package dashboard

import (
	"encoding/json"
	"fmt"
	"github.com/otad/otad/rollout"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/mqtt"
)

// testServer is a Server of n devices fed straight into its view.
func testServer(t *testing.T, n int) (*Server, http.Handler) {
	t.Helper()
	acc := &Access{Listen: "127.0.0.1:0"}
	if err := acc.Check(); err != nil {
		t.Fatal(err)
	}
	s := &Server{Fleet: fleetview.New("ota"), Rollouts: NewRollouts("ota", rollout.Trust{Unsigned: true}, nil), Access: acc}
	for i := range n {
		id := fmt.Sprintf("gw-%06d", i)
		s.Fleet.Observe("ota/devices/"+id+"/status", fmt.Appendf(nil, `{"device":%q,"seq":1,"state":"idle","booted_slot":"A","slots":{"A":{"version":"v%d","status":"good"}}}`, id, i%30))
	}
	return s, s.Handler()
}

func call(t *testing.T, h http.Handler, path string, out any) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Host = "127.0.0.1:8080"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if out != nil && w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return w.Code
}

func TestDevicesAPI(t *testing.T) {
	_, h := testServer(t, 1000)
	var p fleetview.Page
	if code := call(t, h, "/api/devices?offset=990&limit=50", &p); code != 200 || p.Total != 1000 || len(p.Devices) != 10 || p.Devices[0].ID != "gw-000990" {
		t.Errorf("last page: %d, total %d, %d rows", code, p.Total, len(p.Devices))
	}
	if call(t, h, "/api/devices?limit=100000", &p); len(p.Devices) != maxPage {
		t.Errorf("a page of %d rows, want at most %d", len(p.Devices), maxPage)
	}
	if call(t, h, "/api/devices?q=v7&limit=5", &p); p.Total != 34 || len(p.Devices) != 5 { // v7 and v17, v27
		t.Errorf("search: total %d, %d rows", p.Total, len(p.Devices))
	}
	for _, bad := range []string{"/api/devices?state=exploding", "/api/devices?offset=-1", "/api/devices?limit=x", "/api/devices?online=maybe"} {
		if code := call(t, h, bad, nil); code != http.StatusBadRequest {
			t.Errorf("%s: %d", bad, code)
		}
	}
	if code := call(t, h, "/api/device?id=nobody", nil); code != http.StatusNotFound {
		t.Errorf("an unknown device: %d", code)
	}
	var o Overview
	// 30 versions: the 20 most run are charted, the other 10 added up.
	call(t, h, "/api/summary", &o)
	sum := 0
	for _, n := range o.Summary.Versions {
		sum += n
	}
	if o.Summary.Devices != 1000 || len(o.Summary.Versions) != maxBars+1 || o.Summary.Versions[other] != 330 || sum != 1000 {
		t.Errorf("summary: %d devices, %d versions, %d other, %d in all", o.Summary.Devices, len(o.Summary.Versions), o.Summary.Versions[other], sum)
	}
}

// A rollout state that does not decode is shown as such; a cleared one is
// forgotten; a topic that is no rollout's state is not taken.
func TestRolloutsObserve(t *testing.T) {
	s, h := testServer(t, 0)
	r := s.Rollouts
	for _, m := range []mqtt.Message{
		{Topic: "ota/rollouts/a/state", Payload: []byte(`{"name":"a","state":"running","wave_count":2,"waves":[]}`)},
		{Topic: "ota/rollouts/b/state", Payload: []byte(`<script>`)},
		{Topic: "ota/rollouts/c/state", Payload: []byte(`{"name":"c"}`)},
		{Topic: "ota/rollouts/c/state", Payload: nil},
		// Over the read limit, dropped unread: a bad state, never a cleared one.
		{Topic: "ota/rollouts/d/state", Oversized: 300_000},
	} {
		if !r.Observe(m) {
			t.Errorf("%s not taken", m.Topic)
		}
	}
	for _, topic := range []string{"ota/rollouts/a/control", "ota/devices/x/status", "other/rollouts/a/state"} {
		if r.Observe(mqtt.Message{Topic: topic, Payload: []byte("{}")}) {
			t.Errorf("%s taken", topic)
		}
	}
	var vs []RolloutView
	call(t, h, "/api/rollouts", &vs)
	if len(vs) != 3 || vs[0].Name != "a" || vs[0].Phase != "running" || len(vs[0].Waves) != 2 || vs[1].Name != "b" || !strings.Contains(vs[1].BadState, "invalid character") ||
		vs[2].Name != "d" || !strings.Contains(vs[2].BadState, "ota/rollouts/d/state is 300000 bytes, over the limit of 131072") {
		t.Errorf("rollouts %+v", vs)
	}
}

// The 36-byte state that took the dashboard to 2 GB: refused where it is
// decoded, shown as a bad state naming the field, and a summary of it
// allocates far under 64 MiB.
func TestBombStateInSummary(t *testing.T) {
	s, h := testServer(t, 10)
	for _, n := range []int{1_000_000, 100_000_000} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s.Rollouts.Observe(mqtt.Message{Topic: "ota/rollouts/bomb/state", Payload: fmt.Appendf(nil, `{"name":"bomb","wave_count":%d}`, n)})
		var o Overview
		code := call(t, h, "/api/summary", &o)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
			t.Errorf("wave_count %d: the summary allocated %d bytes, want under 64 MiB", n, alloc)
		}
		if code != http.StatusOK || len(o.Rollouts) != 1 || !strings.Contains(o.Rollouts[0].BadState, "wave_count") || len(o.Rollouts[0].Waves) != 0 {
			t.Errorf("wave_count %d: %d %+v", n, code, o.Rollouts)
		}
	}
}

// Issue 27: the rollout of an image signed again does not list as failed
// the devices whose last result is the first signature's failure (same id,
// same image, another manifest); a device that failed this very offer is.
// The refusals are charted and filter the table.
func TestRolloutFailuresAreThisOffersOnly(t *testing.T) {
	s, h := testServer(t, 0)
	first, again := strings.Repeat("1", 64), strings.Repeat("2", 64)
	for id, manifest := range map[string]string{"gw-old": first, "gw-new": again} {
		s.Fleet.Observe("ota/devices/"+id+"/status", fmt.Appendf(nil, `{"device":%q,"seq":1,"state":"idle","booted_slot":"A","groups":["fleet"],
		 "slots":{"A":{"version":"1","status":"good"}},
		 "last_result":{"id":"fw-2.0","sha256":"img","manifest_sha256":%q,"result":"failed","code":"download_failed"},
		 "last_refusal":{"id":"fw-1","code":"expired","time":"2026-12-01T00:00:00Z"}}`, id, manifest))
	}
	s.Rollouts.Observe(mqtt.Message{Topic: "ota/rollouts/fw-2_0b/state", Payload: fmt.Appendf(nil,
		`{"name":"fw-2_0b","group":"fleet","state":"running","offer":{"id":"fw-2.0","sha256":"img","manifest_sha256":%q},"wave_count":1,"waves":[]}`, again)})
	var vs []RolloutView
	call(t, h, "/api/rollouts", &vs)
	if len(vs) != 1 || vs[0].FailedAll != 1 || vs[0].Failed[0].Device != "gw-new" {
		t.Errorf("rollouts %+v, want gw-new alone failed", vs)
	}
	var o Overview
	call(t, h, "/api/summary", &o)
	if o.Summary.Refusals["expired"] != 2 {
		t.Errorf("refusals %+v", o.Summary.Refusals)
	}
	var p fleetview.Page
	if call(t, h, "/api/devices?refusal=expired", &p); p.Total != 2 {
		t.Errorf("devices refused as expired: %d", p.Total)
	}
	if call(t, h, "/api/devices?refusal=incompatible", &p); p.Total != 0 {
		t.Errorf("devices refused as incompatible: %d", p.Total)
	}
}

// The rollouts followed are bounded: their names come from outside.
func TestRolloutsBounded(t *testing.T) {
	r := NewRollouts("ota", rollout.Trust{Unsigned: true}, nil)
	for i := range maxRollouts + 50 {
		r.Observe(mqtt.Message{Topic: fmt.Sprintf("ota/rollouts/r%d/state", i), Payload: []byte(`{`)})
	}
	if n := len(r.Views(fleetview.New("ota"), time.Now())); n != maxRollouts {
		t.Errorf("%d rollouts followed, want %d", n, maxRollouts)
	}
}
