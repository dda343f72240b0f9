package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/rollout"
)

// Pause, resume and abort: only behind the token, only with the action
// header (no forged form), only on a rollout in the view that has not
// ended; each publishes through the Commander.
func TestActions(t *testing.T) {
	type call struct {
		name   string
		op     rollout.Op
		reason string
	}
	var calls []call
	command := func(_ context.Context, name string, op rollout.Op, reason string) error {
		calls = append(calls, call{name, op, reason})
		return nil
	}
	server := func(token bool, command Commander) http.Handler {
		acc := &Access{Listen: "127.0.0.1:0"}
		if token {
			acc.TokenFile = tokenFile(t, testToken)
		}
		if err := acc.Check(); err != nil {
			t.Fatal(err)
		}
		s := &Server{Rollouts: NewRollouts("ota", rollout.Trust{Unsigned: true}, nil), Access: acc, Command: command}
		for name, st := range map[string]string{"run": "running", "done": "finished"} {
			raw := `{"name":"` + name + `","state":"` + st + `","wave_count":1`
			if st == "finished" {
				raw += `,"finished":{"time":"2026-12-03T10:00:00Z"}`
			}
			s.Rollouts.Observe(mqtt.Message{Topic: "ota/rollouts/" + name + "/state", Payload: []byte(raw + "}")})
		}
		return s.Handler()
	}
	post := func(h http.Handler, path, body string, header bool) (int, string) {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Host = "127.0.0.1:8080"
		req.Header.Set("Authorization", "Bearer "+testToken)
		if header {
			req.Header.Set(actionHeader, "1")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	withToken, without, noKey := server(true, command), server(false, command), server(true, nil)
	for _, c := range []struct {
		what   string
		h      http.Handler
		path   string
		header bool
		code   int
		says   string
	}{
		{"no token set", without, "/api/rollouts/run/pause", true, http.StatusForbidden, "need the dashboard's --token-file"},
		{"no operator key", noKey, "/api/rollouts/run/pause", true, http.StatusForbidden, "need an operator key to sign them: start the dashboard with --operator-key"},
		{"a forged form", withToken, "/api/rollouts/run/pause", false, http.StatusForbidden, "X-Otad-Action"},
		{"an unknown op", withToken, "/api/rollouts/run/explode", true, http.StatusNotFound, "unknown action"},
		{"an unknown rollout", withToken, "/api/rollouts/nope/pause", true, http.StatusNotFound, "no rollout"},
		{"an ended rollout", withToken, "/api/rollouts/done/abort", true, http.StatusConflict, "is finished: nothing to abort"},
		{"pause", withToken, "/api/rollouts/run/pause", true, http.StatusOK, `"published":"pause"`},
	} {
		code, body := post(c.h, c.path, `{"reason":"night"}`, c.header)
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s: %d %q, want %d saying %q", c.what, code, body, c.code, c.says)
		}
	}
	if len(calls) != 1 || calls[0] != (call{"run", rollout.OpPause, "night"}) {
		t.Errorf("published %+v, want one pause of run", calls)
	}
	// Without the token, nobody gets through at all.
	req := httptest.NewRequest(http.MethodPost, "/api/rollouts/run/abort", nil)
	req.Header.Set(actionHeader, "1")
	w := httptest.NewRecorder()
	withToken.ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized || len(calls) != 1 {
		t.Errorf("without the token: %d, %d published", w.Code, len(calls))
	}
}
