package fleetview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/otad/otad/ota"
)

// statusOf is an idle device's status in group g, running version v from
// slot A, its last result r (nil for none).
func statusOf(id, g, v string, r *ota.Outcome) string {
	res := ""
	if r != nil {
		res = fmt.Sprintf(`,"last_result":{"id":%q,"result":%q,"code":%q}`, r.ID, r.Result, r.Code)
	}
	return fmt.Sprintf(`{"device":%q,"seq":1,"state":"idle","booted_slot":"A","groups":[%q],"slots":{"A":{"version":%q,"status":"good"}}%s}`, id, g, v, res)
}

func testFleet(t *testing.T) *View {
	t.Helper()
	v := New("ota")
	failed := &ota.Outcome{ID: "r2", Result: ota.ResultFailed, Code: ota.CodeHealthCheckFailed}
	for i := range 10 {
		id := fmt.Sprintf("gw-%02d", i)
		g, ver := "eu", "1.0.0"
		if i%2 == 1 {
			g, ver = "us", "2.0.0"
		}
		var r *ota.Outcome
		if i == 3 || i == 5 {
			r = failed
		}
		v.Observe("ota/devices/"+id+"/status", []byte(statusOf(id, g, ver, r)))
		if i < 8 {
			v.Observe("ota/devices/"+id+"/online", []byte(fmt.Sprintf(`{"online":%v}`, i < 6)))
		}
	}
	v.Observe("ota/devices/zz-bad/status", []byte(`{"device":`))
	// A device whose status was cleared stays, with none; one heard of
	// only by its presence is not a device of the view.
	v.Observe("ota/devices/zz-quiet/online", []byte(`{"online":true}`))
	v.Observe("ota/devices/zz-quiet/status", []byte(statusOf("zz-quiet", "eu", "1.0.0", nil)))
	v.Observe("ota/devices/zz-quiet/status", nil)
	v.Observe("ota/devices/zz-ghost/online", []byte(`{"online":true}`))
	return v
}

func ids(p Page) []string {
	var out []string
	for _, d := range p.Devices {
		out = append(out, d.ID)
	}
	return out
}

func TestQuery(t *testing.T) {
	v := testFleet(t)
	for _, tt := range []struct {
		name          string
		f             Filter
		offset, limit int
		total         int
		want          []string
	}{
		{"all, paged", Filter{}, 2, 3, 12, []string{"gw-02", "gw-03", "gw-04"}},
		{"past the end", Filter{}, 11, 5, 12, []string{"zz-quiet"}},
		{"group", Filter{Group: "us"}, 0, 0, 5, []string{"gw-01", "gw-03", "gw-05", "gw-07", "gw-09"}},
		{"version", Filter{Version: "1.0.0"}, 0, 2, 5, []string{"gw-00", "gw-02"}},
		{"offline", Filter{Online: OnlineNo}, 0, 0, 2, []string{"gw-06", "gw-07"}},
		{"presence unknown", Filter{Online: OnlineUnknown}, 0, 0, 3, []string{"gw-08", "gw-09", "zz-bad"}},
		{"failure code", Filter{Failure: "health_check_failed"}, 0, 0, 2, []string{"gw-03", "gw-05"}},
		{"bad status", Filter{State: StateBad}, 0, 0, 1, []string{"zz-bad"}},
		{"no status", Filter{State: StateNone}, 0, 0, 1, []string{"zz-quiet"}},
		{"search id", Filter{Search: "ZZ"}, 0, 0, 2, []string{"zz-bad", "zz-quiet"}},
		{"search version and group", Filter{Search: "2.0", Group: "us", Devices: []string{"gw-01", "gw-02", "gw-09"}}, 0, 0, 2, []string{"gw-01", "gw-09"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := v.Query(tt.f, tt.offset, tt.limit)
			if p.Total != tt.total || !slices.Equal(ids(p), tt.want) {
				t.Errorf("total %d %v, want %d %v", p.Total, ids(p), tt.total, tt.want)
			}
		})
	}
	d := v.Query(Filter{Devices: []string{"gw-03"}}, 0, 0).Devices[0]
	if d.Running != "1.0.0" && d.Running != "2.0.0" || d.Online == nil || !*d.Online || d.Failure() != "health_check_failed" || d.Groups[0] != "us" {
		t.Errorf("gw-03: %+v", d)
	}
	if bad := v.Query(Filter{State: StateBad}, 0, 0).Devices[0]; bad.BadStatus == "" || bad.State != "" {
		t.Errorf("bad status shown as %+v", bad)
	}
}

// Issue 27: an offer the checks refused changed nothing on the device and
// showed nowhere but --json; an install past its flip waiting for a manual
// reboot, which devices report as staged, counts as staged.
func TestSummaryCountsRefusalsAndStaged(t *testing.T) {
	v := New("ota")
	good := map[ota.Slot]ota.SlotStatus{"A": {Version: "1.0.0", Status: ota.SlotGood}, "B": {Version: "2.0.0", Status: ota.SlotStaged}}
	for _, st := range []ota.Status{
		{Device: "d1", State: ota.Idle, BootedSlot: "A", Slots: good, LastRefusal: &ota.Refusal{ID: "r", Code: ota.CodeExpired}},
		{Device: "d2", State: ota.Idle, BootedSlot: "A", Slots: good, LastRefusal: &ota.Refusal{ID: "r", Code: ota.CodeExpired}},
		{Device: "d3", State: ota.Idle, BootedSlot: "A", Slots: good, LastRefusal: &ota.Refusal{Code: ota.CodeIncompatible}},
		{Device: "d4", State: ota.Staged, BootedSlot: "A", Slots: good, Target: &ota.TargetStatus{ID: "r2", Version: "2.0.0", BytesDone: 10, BytesTotal: 10}},
	} {
		b, _ := json.Marshal(st)
		v.Observe("ota/devices/"+st.Device+"/status", b)
	}
	s := v.Summary(Filter{})
	if s.Refusals["expired"] != 2 || s.Refusals["incompatible"] != 1 || len(s.Refusals) != 2 || s.States["staged"] != 1 {
		t.Errorf("summary %+v", s)
	}
	var buf bytes.Buffer
	if err := s.Write(&buf); err != nil {
		t.Fatal(err)
	}
	want := "4 devices\nstate:    3 idle, 1 staged\nrunning:  4 1.0.0\nonline:   4 unknown\nrefused:  2 expired, 1 incompatible\n"
	if buf.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", buf.String(), want)
	}
	if got := v.Query(Filter{Refusal: "expired"}, 0, 0).Devices; len(got) != 2 || got[0].ID != "d1" || got[1].ID != "d2" {
		t.Errorf("devices refused as expired: %+v", got)
	}
	buf.Reset()
	if err := v.Render(&buf, Filter{State: "staged"}, false); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 2 || !regexp.MustCompile(`^d4\s+\?\s+staged\s+1\.0\.0\s+A\s+1\.0\.0 \(good\)\s+2\.0\.0 \(staged\)\s+2\.0\.0 100%`).MatchString(lines[1]) {
		t.Errorf("staged device:\n%s", buf.String())
	}
}

func TestFilterCheck(t *testing.T) {
	for _, f := range []Filter{{State: "idle"}, {State: StateBad}, {Online: OnlineNo}, {}} {
		if err := f.Check(); err != nil {
			t.Errorf("%+v: %v", f, err)
		}
	}
	for _, f := range []Filter{{State: "Idle"}, {State: "broken"}, {Online: "maybe"}} {
		if err := f.Check(); err == nil {
			t.Errorf("%+v passes", f)
		}
	}
}

func TestSummary(t *testing.T) {
	v := testFleet(t)
	s := v.Summary(Filter{})
	if s.Devices != 12 || s.States["idle"] != 10 || s.States[StateBad] != 1 || s.States[StateNone] != 1 ||
		s.Versions["1.0.0"] != 5 || s.Versions["2.0.0"] != 5 || s.Online[OnlineYes] != 7 || s.Online[OnlineNo] != 2 ||
		s.Failures["health_check_failed"] != 2 || len(s.Failures) != 1 {
		t.Errorf("summary %+v", s)
	}
	var buf bytes.Buffer
	if err := v.Summary(Filter{Group: "us"}).Write(&buf); err != nil {
		t.Fatal(err)
	}
	want := "5 devices\nstate:    5 idle\nrunning:  5 2.0.0\nonline:   3 yes, 1 no, 1 unknown\nfailures: 2 health_check_failed\n"
	if buf.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", buf.String(), want)
	}
	buf.Reset()
	New("ota").Summary(Filter{}).Write(&buf)
	if buf.String() != "0 devices\n" {
		t.Errorf("empty fleet: %q", buf.String())
	}
}

// The last result is shown only beside the install it belongs to.
func TestResultOfTheCurrentTarget(t *testing.T) {
	first, again := strings.Repeat("1", 64), strings.Repeat("2", 64)
	r := &ota.Outcome{ID: "rel-1", ManifestSHA256: first, Result: ota.ResultSuccess}
	for _, tt := range []struct {
		target *TargetView
		shown  bool
	}{
		{nil, true},
		{&TargetView{ID: "rel-1"}, true},
		{&TargetView{ID: "rel-1", ManifestSHA256: first}, true},
		{&TargetView{ID: "rel-2"}, false},
		// The same image signed again: the same id, another manifest.
		{&TargetView{ID: "rel-1", ManifestSHA256: again}, false},
	} {
		if got := (Device{LastResult: r, Target: tt.target}).Result() != nil; got != tt.shown {
			t.Errorf("target %+v: shown %v", tt.target, got)
		}
	}
}

// A device's events are kept, the last few, their messages cut; events
// that name another device, or do not decode, are dropped.
func TestDeviceEvents(t *testing.T) {
	v := New("ota")
	v.Observe("ota/devices/gw-1/status", []byte(statusOf("gw-1", "eu", "1.0.0", nil)))
	for i := range maxEvents + 3 {
		v.Observe("ota/devices/gw-1/events", fmt.Appendf(nil, `{"device":"gw-1","seq":%d,"from":"idle","to":"downloading","message":%q}`, i, strings.Repeat("é", 1000)))
	}
	v.Observe("ota/devices/gw-1/events", []byte(`{"device":"gw-2","seq":99}`))
	v.Observe("ota/devices/gw-1/events", []byte(`not json`))
	d, evs, ok := v.Device("gw-1")
	if !ok || d.Running != "1.0.0" || len(evs) != maxEvents || evs[0].Seq != 3 || evs[maxEvents-1].Seq != maxEvents+2 {
		t.Fatalf("ok %v, %d events from seq %d", ok, len(evs), evs[0].Seq)
	}
	if m := evs[0].Message; len(m) > maxEventText+len("…") || !strings.HasSuffix(m, "é…") {
		t.Errorf("message of %d bytes: %q…", len(m), m[:20])
	}
	if _, _, ok := v.Device("gw-9"); ok {
		t.Error("an unknown device is known")
	}
}
