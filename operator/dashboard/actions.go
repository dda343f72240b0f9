package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/otad/otad/rollout"
)

// Commander publishes an operator command on a rollout's control topic, as
// `otactl rollout pause/resume/abort` do (docs/contract/rollouts.md,
// operator commands). otactl gives the dashboard the same code it runs.
type Commander func(ctx context.Context, name string, op rollout.Op, reason string) error

// actionHeader must be on every action: a page of another site cannot set
// it (a cross-origin request with it needs a CORS preflight, which this
// server never grants), so a forged form cannot steer a rollout.
const actionHeader = "X-Otad-Action"

// actionTimeout bounds one command's publish.
const actionTimeout = 10 * time.Second

// actionsOn reports whether the page offers pause, resume and abort: only
// behind the token, and only when otactl gave a Commander.
func (s *Server) actionsOn() bool { return s.Command != nil && s.Access.token != nil }

// postAction is POST /api/rollouts/{name}/{op} with an optional JSON body
// {"reason": "..."}: the command published on the rollout's control topic.
func (s *Server) postAction(w http.ResponseWriter, r *http.Request) {
	name, op := r.PathValue("name"), rollout.Op(r.PathValue("op"))
	switch {
	case s.Access.token == nil:
		http.Error(w, "pause, resume and abort need the dashboard's --token-file", http.StatusForbidden)
		return
	case s.Command == nil:
		// Nothing unsigned is published: the controllers would ignore it.
		http.Error(w, "pause, resume and abort need an operator key to sign them: start the dashboard with --operator-key (or [operator] key in the otactl config)", http.StatusForbidden)
		return
	case r.Header.Get(actionHeader) == "":
		http.Error(w, "an action needs the "+actionHeader+" header", http.StatusForbidden)
		return
	case !op.Valid():
		http.Error(w, fmt.Sprintf("unknown action %q: pause, resume or abort", op), http.StatusNotFound)
		return
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10)).Decode(&body); err != nil {
			http.Error(w, "want {\"reason\": TEXT}: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	st, err := s.Rollouts.state(name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if st.Terminal() {
		http.Error(w, fmt.Sprintf("rollout %s is %s: nothing to %s", name, st.Phase, op), http.StatusConflict)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	if err := s.Command(ctx, name, op, body.Reason); err != nil {
		s.Log.Warn("dashboard: command not published", "rollout", name, "op", op, "err", err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	s.Log.Info("dashboard: command published", "rollout", name, "op", op, "from", r.RemoteAddr)
	writeJSON(w, map[string]string{"rollout": name, "published": string(op)})
}

// state is rollout name's state as last seen.
func (r *Rollouts) state(name string) (rollout.State, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.states[name]
	switch {
	case !ok:
		return rollout.State{}, fmt.Errorf("no rollout %q in the view", name)
	case e.err != "":
		return rollout.State{}, errors.New("the state of rollout " + name + " does not decode: " + e.err)
	}
	return e.state, nil
}
