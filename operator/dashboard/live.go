package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// The live stream (server-sent events on /api/live): after a change, the
// overview is sent to every open page at most every liveEvery; a comment
// every liveKeep keeps proxies from closing a quiet stream. maxStreams
// bounds the pages open at once; a page that opens one more closes the
// oldest stream of the client holding the most (its page reconnects after
// liveRetry), so no client can lock the others out. Every write must be
// taken within liveWrite, or the stream is dropped: a reader that stalls
// holds no goroutine and no buffer for long.
const (
	liveEvery  = 500 * time.Millisecond
	liveKeep   = 15 * time.Second
	liveWrite  = 10 * time.Second
	liveRetry  = 5 * time.Second
	maxStreams = 32
)

// stream is one open page's.
type stream struct {
	msgs   chan []byte
	client string        // the remote address's host
	n      uint64        // the order it opened in
	closed chan struct{} // closed when evicted for a newer page
}

// hub sends the overview to the open streams.
type hub struct {
	snapshot func() Overview
	dirty    chan struct{} // a change since the last send

	mu      sync.Mutex
	streams map[*stream]struct{}
	opened  uint64
	last    []byte // the last overview sent, for a stream that opens
}

func newHub(snapshot func() Overview) *hub {
	return &hub{snapshot: snapshot, dirty: make(chan struct{}, 1), streams: map[*stream]struct{}{}}
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
			case <-s.msgs:
			default:
			}
			s.msgs <- b
		}
		h.mu.Unlock()
	}
}

// open adds a stream for client, closing the oldest stream of the client
// that holds the most when there are maxStreams already.
func (h *hub) open(client string) (*stream, []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.streams) >= maxStreams {
		per := map[string]int{}
		for s := range h.streams {
			per[s.client]++
		}
		var victim *stream
		for s := range h.streams {
			if victim == nil || per[s.client] > per[victim.client] || (per[s.client] == per[victim.client] && s.n < victim.n) {
				victim = s
			}
		}
		delete(h.streams, victim)
		close(victim.closed)
	}
	h.opened++
	s := &stream{msgs: make(chan []byte, 1), client: client, n: h.opened, closed: make(chan struct{})}
	h.streams[s] = struct{}{}
	return s, h.last
}

func (h *hub) close(s *stream) {
	h.mu.Lock()
	delete(h.streams, s)
	h.mu.Unlock()
}

// open is how many streams are open.
func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.streams)
}

// serve is one page's stream: the overview now, then after every change.
func (h *hub) serve(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	client, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		client = r.RemoteAddr
	}
	// A stream reads nothing more: no read deadline of the server's
	// (ReadTimeout) is left to end it.
	_ = rc.SetReadDeadline(time.Time{})
	s, first := h.open(client)
	defer h.close(s)
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
	fmt.Fprintf(w, "retry: %d\n", liveRetry.Milliseconds())
	msg := first
	for {
		// A page that does not take what is sent within liveWrite is
		// dropped (the server's WriteTimeout does not fit a stream).
		if rc.SetWriteDeadline(time.Now().Add(liveWrite)) != nil {
			return
		}
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
		case <-s.closed:
			return // a newer page took its place
		case msg = <-s.msgs:
		case <-keep.C:
		}
	}
}
