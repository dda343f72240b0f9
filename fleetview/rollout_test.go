package fleetview

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/rollout"
)

// snap is a status snapshot as a device publishes it.
func snap(dev string, seq uint64, state ota.Phase, booted ota.Slot, slots map[string]string, last *ota.Outcome) []byte {
	st := ota.Status{Device: dev, Seq: seq, BootID: "boot", State: state, BootedSlot: booted, Slots: map[ota.Slot]ota.SlotStatus{}, LastResult: last}
	for name, s := range slots { // "version:status"
		v, status, _ := strings.Cut(s, ":")
		st.Slots[ota.Slot(name)] = ota.SlotStatus{Version: v, Status: ota.SlotState(status)}
	}
	b, _ := json.Marshal(st)
	return b
}

// refused is a snapshot of an idle device on slot A whose checks refused an
// offer at the given time.
func refused(dev string, seq uint64, code ota.Code, at time.Time) []byte {
	return refusedOffer(dev, seq, "", code, at)
}

// refusedOffer is refused, the refusal naming offer id.
func refusedOffer(dev string, seq uint64, id string, code ota.Code, at time.Time) []byte {
	st := ota.Status{Device: dev, Seq: seq, BootID: "boot", State: ota.Idle, BootedSlot: "A",
		Slots:       map[ota.Slot]ota.SlotStatus{"A": {Version: "1.0.0", Status: ota.SlotGood}},
		LastRefusal: &ota.Refusal{ID: id, Code: code, Time: at}}
	b, _ := json.Marshal(st)
	return b
}

func res(id string, result ota.Result, code ota.Code) *ota.Outcome {
	return &ota.Outcome{ID: id, Result: result, Code: code}
}

type msg struct {
	topic   string
	payload []byte
}

func status(dev string, b []byte) msg { return msg{"ota/devices/" + dev + "/status", b} }
func online(dev string, on bool) msg {
	b, _ := json.Marshal(map[string]bool{"online": on})
	return msg{"ota/devices/" + dev + "/online", b}
}

func TestRolloutCheck(t *testing.T) {
	good := map[string]string{"A": "1.0.0:good", "B": "2.0.0:good"}
	aBad := map[string]string{"A": "2.1.0:bad", "B": "2.0.0:good"}
	ok := rollout.Outcome{Result: ota.ResultSuccess}
	hc := rollout.Outcome{Result: ota.ResultFailed, Code: ota.CodeHealthCheckFailed}
	devs := []string{"d1", "d2"}
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		before  []msg // before Begin("r")
		after   []msg
		want    rollout.Outcome
		pending []string
		wrong   int
	}{
		{"nothing heard", nil, nil, ok, devs, 0},
		{"both succeed", nil, []msg{
			status("d1", snap("d1", 5, ota.Idle, "B", good, res("r", "success", ""))),
			status("d2", snap("d2", 5, ota.Idle, "B", good, res("r", "success", ""))),
		}, ok, nil, 0},
		{"still installing", nil, []msg{
			status("d1", snap("d1", 5, ota.Idle, "B", good, res("r", "success", ""))),
			status("d2", snap("d2", 3, ota.Downloading, "A", good, nil)),
		}, ok, []string{"d2"}, 0},
		{"outcome of another rollout", nil, []msg{
			status("d1", snap("d1", 5, ota.Idle, "B", good, res("old", "success", ""))),
			status("d2", snap("d2", 5, ota.Idle, "B", good, res("r", "success", ""))),
		}, ok, []string{"d1"}, 0},
		// Rejecting the booted slot: "idle, failed" on the bad slot first, then the reboot.
		{"failed but not yet rebooted", nil, []msg{
			status("d1", snap("d1", 9, ota.Idle, "A", aBad, res("r", "failed", "health_check_failed"))),
			status("d2", snap("d2", 9, ota.Idle, "A", aBad, res("r", "failed", "health_check_failed"))),
			status("d2", snap("d2", 10, ota.Idle, "B", aBad, res("r", "failed", "health_check_failed"))),
		}, hc, []string{"d1"}, 0},
		{"unexpected outcome", nil, []msg{
			status("d1", snap("d1", 5, ota.Idle, "B", good, res("r", "failed", "hash_mismatch"))),
			status("d2", snap("d2", 5, ota.Idle, "B", good, res("r", "failed", "health_check_failed"))),
		}, hc, nil, 1},
		{"forged offer refused", []msg{
			status("d1", refused("d1", 2, ota.CodeBadSignature, t0)),
		}, []msg{
			status("d1", refused("d1", 3, ota.CodeBadSignature, t0)),
			status("d2", refused("d2", 3, ota.CodeBadSignature, t0.Add(time.Second))),
		}, ok, []string{"d1"}, 1}, // d1's refusal is older than the rollout
		// A refusal naming the offer is its outcome (rollout.OutcomeOf):
		// stale is superseded, incompatible rejected.
		{"offer refused by name", nil, []msg{
			status("d1", refusedOffer("d1", 3, "r", ota.CodeStale, t0)),
			status("d2", refusedOffer("d2", 3, "r", ota.CodeIncompatible, t0)),
		}, rollout.Outcome{Result: ota.ResultSuperseded, Code: ota.CodeStale}, nil, 1},
		{"late older snapshot ignored", nil, []msg{
			status("d1", snap("d1", 5, ota.Idle, "B", good, res("r", "success", ""))),
			status("d1", snap("d1", 4, ota.Confirming, "B", good, nil)),
			status("d2", snap("d2", 5, ota.Idle, "B", good, res("r", "success", ""))),
		}, ok, nil, 0},
		{"malformed and foreign messages", nil, []msg{
			status("d1", []byte("{not json")),
			status("d1", snap("d2", 5, ota.Idle, "B", good, res("r", "success", ""))), // names another device
			{"ota/devices/d2/events", snap("d2", 5, ota.Idle, "B", good, res("r", "success", ""))},
			{"other/devices/d2/status", snap("d2", 5, ota.Idle, "B", good, res("r", "success", ""))},
		}, ok, devs, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New("")
			for _, m := range tt.before {
				tr.Observe(m.topic, m.payload)
			}
			tr.Begin("r")
			for _, m := range tt.after {
				tr.Observe(m.topic, m.payload)
			}
			v := tr.Check(devs, tt.want)
			if !reflect.DeepEqual(v.Pending, tt.pending) || len(v.Wrong) != tt.wrong {
				t.Fatalf("verdict %+v; want pending %v and %d wrong", v, tt.pending, tt.wrong)
			}
			if v.Done() != (tt.pending == nil && tt.wrong == 0) {
				t.Fatalf("Done() = %v for %+v", v.Done(), v)
			}
		})
	}
}

// The same image signed again after its first offer failed (issue 27): a
// follower given the new offer's digest takes neither the first offer's
// failure nor its refusal for the new one's, and a device installing the
// new one is pending.
func TestFollowAnOfferSignedAgain(t *testing.T) {
	first, again := strings.Repeat("1", 64), strings.Repeat("2", 64)
	good := map[ota.Slot]ota.SlotStatus{"A": {Version: "1.0.0", Status: ota.SlotGood}}
	st := func(dev string, seq uint64, phase ota.Phase, target string, last *ota.Outcome, refusal *ota.Refusal) msg {
		s := ota.Status{Device: dev, Seq: seq, BootID: "boot", State: phase, BootedSlot: "A", Slots: good, LastResult: last, LastRefusal: refusal}
		if target != "" {
			s.Target = &ota.TargetStatus{ID: "fw-2", SHA256: "img", ManifestSHA256: target}
		}
		b, _ := json.Marshal(s)
		return status(dev, b)
	}
	failed := &ota.Outcome{ID: "fw-2", SHA256: "img", ManifestSHA256: first, Result: ota.ResultFailed, Code: ota.CodeDownloadFailed}
	tr := New("")
	tr.Observe(st("d1", 1, ota.Idle, "", failed, nil).topic, st("d1", 1, ota.Idle, "", failed, nil).payload)
	tr.BeginOffer(rollout.Ref{ID: "fw-2", SHA256: "img", ManifestSHA256: again})
	for _, m := range []msg{
		st("d1", 2, ota.Downloading, again, failed, nil),
		st("d2", 1, ota.Idle, "", nil, &ota.Refusal{ID: "fw-2", SHA256: "img", ManifestSHA256: first, Code: ota.CodeExpired}),
	} {
		tr.Observe(m.topic, m.payload)
	}
	want := rollout.Outcome{Result: ota.ResultSuccess}
	if v := tr.Check([]string{"d1", "d2"}, want); len(v.Wrong) != 0 || len(v.Pending) != 2 {
		t.Fatalf("verdict %+v: want both pending (the first offer's failure and refusal are not this one's)", v)
	}
	ok := &ota.Outcome{ID: "fw-2", SHA256: "img", ManifestSHA256: again, Result: ota.ResultSuccess}
	m := st("d1", 3, ota.Idle, "", ok, nil)
	tr.Observe(m.topic, m.payload)
	if f, done := tr.Finished("d1", again); !done || f.Result != ota.ResultSuccess {
		t.Fatalf("finish %+v %v", f, done)
	}
	m = st("d2", 2, ota.Idle, "", nil, &ota.Refusal{ID: "fw-2", SHA256: "img", ManifestSHA256: again, Code: ota.CodeExpired})
	tr.Observe(m.topic, m.payload)
	if v := tr.Check([]string{"d1", "d2"}, want); len(v.Wrong) != 1 || !strings.HasPrefix(v.Wrong[0], "d2: rejected/expired") {
		t.Fatalf("verdict %+v: want d2's refusal of this offer", v)
	}
}

func TestFinishAndReady(t *testing.T) {
	tr := New("ota")
	clock := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	tr.now = func() time.Time { return clock }
	good := map[string]string{"A": "1.0.0:good", "B": ":"}
	for _, m := range []msg{online("d1", true), status("d1", snap("d1", 1, ota.Idle, "A", good, nil)), status("d2", snap("d2", 1, ota.Idle, "A", good, nil))} {
		tr.Observe(m.topic, m.payload)
	}
	if got := tr.Ready([]string{"d1", "d2", "d3"}); !reflect.DeepEqual(got, []string{"d2", "d3"}) {
		t.Fatalf("waiting for %v, want d2 (offline) and d3 (unknown)", got)
	}
	if _, ok := tr.Finished("d1", "r"); ok {
		t.Fatal("finished before the rollout")
	}
	tr.Begin("r")
	clock = clock.Add(3 * time.Second)
	tr.Observe("ota/devices/d1/status", snap("d1", 7, ota.Idle, "B", map[string]string{"A": "1.0.0:good", "B": "2.0.0:good"}, res("r", "success", "")))
	clock = clock.Add(time.Second) // a later duplicate changes nothing
	tr.Observe("ota/devices/d1/status", snap("d1", 8, ota.Idle, "B", map[string]string{"A": "1.0.0:good", "B": "2.0.0:good"}, res("r", "success", "")))
	f, ok := tr.Finished("d1", "r")
	want := Finish{Outcome: rollout.Outcome{Result: ota.ResultSuccess, Settled: true}, Took: 3 * time.Second, Booted: "B", Running: "2.0.0"}
	if !ok || f != want {
		t.Fatalf("finish %+v %v, want %+v", f, ok, want)
	}
	if st, ok := tr.Status("d1"); !ok || st.Seq != 8 {
		t.Fatalf("status %+v", st)
	}
	d := tr.Describe([]string{"d2", "d1", "d9"})
	if len(d) != 3 || !strings.HasPrefix(d[0], "d1: state idle, booted B, last result r success") || d[2] != "d9: no status received" {
		t.Fatalf("describe: %q", d)
	}
}

// Status snapshots come from the network: nothing a device sends may crash
// the tracker or make a rollout look finished without a matching status.
func FuzzObserve(f *testing.F) {
	f.Add("ota/devices/d1/status", string(snap("d1", 5, ota.Idle, "B", map[string]string{"B": "2.0.0:good"}, res("r", "success", ""))))
	f.Add("ota/devices/d1/online", `{"online":true}`)
	f.Add("ota/devices/d1/status", `{"device":"d1","state":"idle","slots":null,"last_result":{"id":"r"}}`)
	f.Add("ota/devices//status", `{}`)
	f.Fuzz(func(t *testing.T, topic, payload string) {
		tr := New("ota")
		tr.Begin("r")
		tr.Observe(topic, []byte(payload))
		v := tr.Check([]string{"d1"}, rollout.Outcome{Result: ota.ResultSuccess})
		if v.Done() {
			st, _ := tr.Status("d1")
			if st.State != ota.Idle || st.LastResult == nil || st.LastResult.ID != "r" || st.LastResult.Result != "success" ||
				st.Slots[st.BootedSlot].Status != ota.SlotGood {
				t.Fatalf("done on %q", payload)
			}
		}
		tr.Describe([]string{"d1"})
	})
}
