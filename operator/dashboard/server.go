package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/otad/otad/fleetview"
	"github.com/otad/otad/ota"
)

//go:embed web
var web embed.FS

// Server serves the page and its API from a fleet view and the rollouts'
// states (docs/operating.md, the dashboard).
type Server struct {
	Fleet    *fleetview.View
	Rollouts *Rollouts
	Access   *Access
	Log      *slog.Logger
	// Coverage says how the view was filled (fleetview.Coverage); nil: not shown.
	Coverage func() string
	// Command publishes pause, resume and abort (behind the token); nil:
	// the page offers none.
	Command Commander

	hubOnce sync.Once
	hub     *hub
}

// policy is every response's Content-Security-Policy: the page's own files
// and nothing else; no inline script or style, no frames, no plugins.
const policy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// maxPage bounds a page of the device table.
const maxPage = 500

// Changed tells the live page that the fleet or a rollout changed; cheap,
// call it on every message.
func (s *Server) Changed() { s.live().changed() }

// live is the hub, made on first use: the broker's messages (Changed) and
// the HTTP side may come first.
func (s *Server) live() *hub {
	s.hubOnce.Do(func() { s.hub = newHub(s.snapshot) })
	return s.hub
}

// Handler is the page, its files and its API, behind the access rules.
func (s *Server) Handler() http.Handler {
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	files, _ := fs.Sub(web, "web")
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(files))
	mux.HandleFunc("GET /api/summary", s.getSummary)
	mux.HandleFunc("GET /api/devices", s.getDevices)
	mux.HandleFunc("GET /api/device", s.getDevice)
	mux.HandleFunc("GET /api/rollouts", s.getRollouts)
	mux.HandleFunc("GET /api/live", s.live().serve)
	mux.HandleFunc("POST /api/rollouts/{name}/{op}", s.postAction)
	return headers(s.Access.guard(mux))
}

// headers sets the security headers on every response.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", policy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// Serve serves on ln until ctx ends (TLS when Access has it).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler: s.Handler(),
		// A request is small, an answer quick; the live stream moves its
		// own write deadline on every event (hub.serve).
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		TLSConfig:         s.Access.TLS(),
		BaseContext:       func(net.Listener) context.Context { return ctx }, // ends the live streams
		ErrorLog:          slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn),
	}
	go s.live().run(ctx)
	done := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			done <- srv.ServeTLS(ln, "", "")
		} else {
			done <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Overview is the fleet at a glance: what /api/summary answers and the
// live stream sends on each change.
type Overview struct {
	Summary  fleetview.Summary `json:"summary"`
	Coverage string            `json:"coverage"`
	Rollouts []RolloutView     `json:"rollouts"`
	// Actions: the page offers pause, resume and abort.
	Actions bool      `json:"actions"`
	Time    time.Time `json:"time"`
}

func (s *Server) snapshot() Overview {
	now := time.Now()
	o := Overview{Summary: s.Fleet.Summary(fleetview.Filter{}), Rollouts: s.Rollouts.Views(s.Fleet, now), Actions: s.actionsOn(), Time: now.UTC()}
	if s.Coverage != nil {
		o.Coverage = s.Coverage()
	}
	return tidyOverview(o)
}

func (s *Server) getSummary(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.snapshot()) }

func (s *Server) getRollouts(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, tidyOverview(Overview{Rollouts: s.Rollouts.Views(s.Fleet, time.Now())}).Rollouts)
}

// getDevices is a page of the device table: offset, limit (at most
// maxPage), and the filters q (search), state, version, online, group,
// failure, refusal and trust (a root of trust's version, "v3").
func (s *Server) getDevices(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := fleetview.Filter{Search: q.Get("q"), State: q.Get("state"), Version: q.Get("version"), Online: q.Get("online"),
		Group: q.Get("group"), Failure: q.Get("failure"), Refusal: q.Get("refusal"), Trust: q.Get("trust")}
	if err := f.Check(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	offset, err1 := count(q.Get("offset"), 0)
	limit, err2 := count(q.Get("limit"), 50)
	if err := errors.Join(err1, err2); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p := s.Fleet.Query(f, offset, min(max(limit, 1), maxPage))
	for i, d := range p.Devices {
		p.Devices[i] = tidyDevice(d)
	}
	writeJSON(w, p)
}

// count reads a non-negative query number; "" is def.
func count(s string, def int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, errors.New("offset and limit: want a number ≥ 0, got " + strconv.Quote(s))
	}
	return n, nil
}

// DeviceDetail is a device's page.
type DeviceDetail struct {
	Device fleetview.Device `json:"device"`
	Events []ota.Event      `json:"events"`
}

func (s *Server) getDevice(w http.ResponseWriter, r *http.Request) {
	d, evs, ok := s.Fleet.Device(r.URL.Query().Get("id"))
	if !ok {
		http.Error(w, "no such device in the view", http.StatusNotFound)
		return
	}
	for i := range evs {
		evs[i] = tidyEvent(evs[i])
	}
	writeJSON(w, DeviceDetail{Device: tidyDevice(d), Events: evs})
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}
