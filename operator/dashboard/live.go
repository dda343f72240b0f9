package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// The live stream (server-sent events on /api/live): after a change, the
// overview is sent to every open page at most every liveEvery; a comment
// every liveKeep keeps proxies from closing a quiet stream. maxStreams
// bounds the pages open at once.
const (
	liveEvery  = 500 * time.Millisecond
	liveKeep   = 15 * time.Second
	maxStreams = 32
)

// hub sends the overview to the open streams.
type hub struct {
	snapshot func() Overview
	dirty    chan struct{} // a change since the last send

	mu      sync.Mutex
	streams map[chan []byte]struct{}
	last    []byte // the last overview sent, for a stream that opens
}

func newHub(snapshot func() Overview) *hub {
	return &hub{snapshot: snapshot, dirty: make(chan struct{}, 1), streams: map[chan []byte]struct{}{}}
}

func (h *hub) changed() {
	select {
	case h.dirty <- struct{}{}:
	default:
	}
}

// run sends an overview after each change, paced, until ctx ends.
func (h *hub) run(ctx context.Context) {
	t := time.NewTicker(liveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case <-h.dirty:
		default:
			continue
		}
		b, err := json.Marshal(h.snapshot())
		if err != nil {
			continue
		}
		h.mu.Lock()
		h.last = b
		for s := range h.streams {
			select { // a slow page gets the newest only
			case <-s:
			default:
			}
			s <- b
		}
		h.mu.Unlock()
	}
}

// serve is one page's stream: the overview now, then after every change.
func (h *hub) serve(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	s := make(chan []byte, 1)
	h.mu.Lock()
	if len(h.streams) >= maxStreams {
		h.mu.Unlock()
		http.Error(w, "too many live pages open", http.StatusServiceUnavailable)
		return
	}
	h.streams[s] = struct{}{}
	first := h.last
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.streams, s)
		h.mu.Unlock()
	}()
	if first == nil {
		var err error
		if first, err = json.Marshal(h.snapshot()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	keep := time.NewTicker(liveKeep)
	defer keep.Stop()
	msg := first
	for {
		if msg != nil {
			// JSON holds no raw newline, so one data line carries it.
			fmt.Fprintf(w, "data: %s\n\n", msg)
		} else {
			fmt.Fprint(w, ": keep-alive\n\n")
		}
		if rc.Flush() != nil {
			return
		}
		msg = nil
		select {
		case <-r.Context().Done():
			return
		case msg = <-s:
		case <-keep.C:
		}
	}
}
