package mqtt

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseReportRequest(t *testing.T) {
	tests := []struct {
		in     string
		window time.Duration // for accepted requests
		bad    string        // substring of the error; "" accepted
	}{
		{`{"id":"r-1","window_ms":10000}`, 10 * time.Second, ""},
		{`{"id":"r-1","window_ms":0}`, MinReportWindow, ""},
		{`{"id":"r-1"}`, MinReportWindow, ""},
		{`{"id":"r-1","window_ms":86400000}`, MaxReportWindow, ""},
		{`{"id":"r-1","window_ms":9223372036854775807}`, MaxReportWindow, ""},
		{` {"id":"r-1","window_ms":2500,"future":true}`, 2500 * time.Millisecond, ""},
		{`{"id":"r-1","window_ms":-1}`, 0, "negative"},
		{`{"window_ms":1000}`, 0, "id: not a valid name: empty"},
		{`{"id":"a/b","window_ms":1000}`, 0, "id"},
		{`{"id":"r-1","window_ms":"soon"}`, 0, "cannot unmarshal"},
		{`{"id":"r-1","window_ms":1.5}`, 0, "cannot unmarshal"},
		{`null`, 0, "not a JSON object"},
		{`[]`, 0, "not a JSON object"},
		{``, 0, "not a JSON object"},
		{`{"id":"r-1"`, 0, "unexpected end"},
		{`{"id":"` + strings.Repeat("x", MaxReportRequest) + `"}`, 0, "at most 1024"},
	}
	for _, tt := range tests {
		r, err := ParseReportRequest([]byte(tt.in))
		switch {
		case tt.bad == "" && err != nil:
			t.Errorf("%s: %v", tt.in, err)
		case tt.bad == "" && r.Window() != tt.window:
			t.Errorf("%s: window %v, want %v", tt.in, r.Window(), tt.window)
		case tt.bad != "" && (!errors.Is(err, ErrReportRequest) || !strings.Contains(err.Error(), tt.bad)):
			t.Errorf("%.60s: error %v, want ErrReportRequest mentioning %q", tt.in, err, tt.bad)
		}
	}
	r := NewReportRequest(3 * time.Second)
	back, err := ParseReportRequest(r.Encode())
	if err != nil || back != r {
		t.Fatalf("round trip of %+v: %+v, %v", r, back, err)
	}
}

// Requests come from the broker: whatever arrives, a request either is
// refused or names a valid ID and a bounded window.
func FuzzParseReportRequest(f *testing.F) {
	f.Add([]byte(`{"id":"r-1","window_ms":10000}`))
	f.Add([]byte(`{"id":"r-1","window_ms":-5}`))
	f.Add([]byte(`{"ID":"x","Window_MS":1e3}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReportRequest(b)
		if err != nil {
			return
		}
		if CheckName(r.ID) != nil || r.Window() < MinReportWindow || r.Window() > MaxReportWindow || len(b) > MaxReportRequest {
			t.Fatalf("accepted %q as %+v (window %v)", b, r, r.Window())
		}
	})
}

func TestAnswerPolicy(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	half := func(w time.Duration) time.Duration { return w / 2 } // a deterministic draw
	type req struct {
		at      time.Duration // after t0
		window  time.Duration
		verdict string
		due     time.Duration // after t0, for an answer
		answer  bool          // the pending answer is sent right after this request
	}
	tests := []struct {
		name string
		reqs []req
	}{
		{"one request", []req{{0, 10 * time.Second, answerScheduled, 5 * time.Second, false}}},
		{"second request within the pending answer's reach", []req{
			{0, 10 * time.Second, answerScheduled, 5 * time.Second, false},
			{time.Second, 10 * time.Second, answerPending, 5 * time.Second, false},
		}},
		{"shorter window moves the answer earlier", []req{
			{0, 60 * time.Second, answerScheduled, 30 * time.Second, false},
			{time.Second, 2 * time.Second, answerMoved, 2 * time.Second, false},
		}},
		{"burst, then one per 15s", []req{
			{0, time.Second, answerScheduled, 500 * time.Millisecond, true},
			{time.Second, time.Second, answerScheduled, 1500 * time.Millisecond, true},
			{2 * time.Second, time.Second, answerScheduled, 2500 * time.Millisecond, true},
			{3 * time.Second, time.Second, answerScheduled, 3500 * time.Millisecond, true},
			{4 * time.Second, time.Second, answerLimited, 0, false},
			{10 * time.Second, time.Second, answerLimited, 0, false},
			{19 * time.Second, time.Second, answerScheduled, 19500 * time.Millisecond, true}, // a token has grown back (one per 15 s)
			{20 * time.Second, time.Second, answerLimited, 0, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p answerPolicy
			for i, r := range tt.reqs {
				due, verdict := p.take(t0.Add(r.at), r.window, half)
				if verdict != r.verdict || (r.verdict != answerLimited && due != t0.Add(r.due)) {
					t.Fatalf("request %d: %s at %v, want %s at %v", i, verdict, due.Sub(t0), r.verdict, r.due)
				}
				if r.answer {
					p.answered()
				}
			}
		})
	}
	// A flood: 1000 requests a second for a minute get at most a handful of answers.
	var p answerPolicy
	answers := 0
	for i := range 60_000 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		if !p.due.IsZero() && !p.due.After(now) {
			p.answered()
			answers++
		}
		p.take(now, time.Second, half)
	}
	if want := answerBurst + 4; answers > want {
		t.Fatalf("%d answers to a minute-long flood, want at most %d", answers, want)
	}
}
