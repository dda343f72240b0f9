// Package linktest emulates, in user space, a network link in front of a
// server for tests and benchmarks: a TCP proxy that counts the bytes it
// carries to the client, can be limited to a rate, delayed (latency each
// way), made lossy (Shape: stalls where TCP would retransmit, connections
// reset now and then) and can go down as a mobile link does, refusing
// connections (connection refused or reset) or blackholing them (connections
// open and nothing comes through: stalls, timeouts), until it comes back up.
//
// It works where tc's netem does not (a container whose kernel has no
// sch_netem: `tc qdisc add dev lo root netem` says "Specified qdisc kind is
// unknown"). Being above TCP, it cannot drop a segment: a loss is the stall
// the sender's retransmission costs (shape.go).
package linktest

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Mode is how the link is down.
type Mode int

const (
	// Refuse closes every connection and each new one at once: the
	// client sees resets and refusals.
	Refuse Mode = iota + 1
	// Blackhole lets nothing through the open connections, either way, and
	// holds new ones open without connecting them: the client sees stalls.
	Blackhole
)

// Link is the proxy. Addr is its listening address (127.0.0.1:PORT), for
// the client in place of the server's.
type Link struct {
	Addr string

	target string
	ln     net.Listener
	served atomic.Int64 // bytes carried to the client
	rate   atomic.Int64 // bytes per second towards the client; 0: unlimited
	shape  atomic.Pointer[Shape]

	mu    sync.Mutex
	down  Mode
	conns map[*pair]bool
	held  []net.Conn // connections accepted while blackholed
}

type pair struct {
	client, server net.Conn
	dead           atomic.Bool // blackholed: nothing goes through any more
}

// New listens on a free loopback port for the server at target
// (host:port), until the test ends.
func New(t testing.TB, target string) *Link {
	t.Helper()
	l, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// Start listens on a free loopback port for the server at target
// (host:port), until Close: for a benchmark.
func Start(target string) (*Link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("link: %w", err)
	}
	l := &Link{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[*pair]bool{}}
	go l.serve()
	return l, nil
}

// Close stops listening and closes every connection.
func (l *Link) Close() {
	l.ln.Close()
	l.Down(Refuse)
}

// Served is how many bytes the link carried from the server to the client.
func (l *Link) Served() int64 { return l.served.Load() }

// SetRate limits the bytes per second each connection carries to the client
// (0: no limit).
func (l *Link) SetRate(bytesPerSecond int64) { l.rate.Store(bytesPerSecond) }

// Down takes the link down in mode m until Up.
func (l *Link) Down(m Mode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = m
	for p := range l.conns {
		if m == Refuse {
			p.client.Close()
			p.server.Close()
		} else {
			p.dead.Store(true)
		}
	}
}

// Up brings the link back. Connections blackholed stay dead, as TCP
// connections that lost their peer's packets for long are; those held
// while it was down are closed.
func (l *Link) Up() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = 0
	for _, c := range l.held {
		c.Close()
	}
	l.held = nil
}

func (l *Link) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		down := l.down
		if down == Blackhole {
			l.held = append(l.held, c)
		}
		l.mu.Unlock()
		switch down {
		case Refuse:
			c.Close()
			continue
		case Blackhole:
			continue
		}
		s, err := net.Dial("tcp", l.target)
		if err != nil {
			c.Close()
			continue
		}
		p := &pair{client: c, server: s}
		l.mu.Lock()
		l.conns[p] = true
		l.mu.Unlock()
		sh := l.shape.Load()
		if sh == nil {
			go l.pipe(p, c, s, true)
			go l.pipe(p, s, c, false)
			continue
		}
		go l.shaped(p, c, s, *sh, true)
		go l.shaped(p, s, c, *sh, false)
	}
}

// pipe copies src to dst until either ends; toClient counts and paces.
func (l *Link) pipe(p *pair, dst, src net.Conn, toClient bool) {
	buf := make([]byte, 16<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.dead.Load() {
			if toClient {
				if r := l.rate.Load(); r > 0 {
					time.Sleep(time.Duration(float64(n) / float64(r) * float64(time.Second)))
				}
				if p.dead.Load() {
					continue // the link went down while the bytes were on their way
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
			if toClient {
				l.served.Add(int64(n))
			}
		}
		if err != nil {
			break
		}
	}
	if p.dead.Load() {
		return // the client's side stays open and silent; Down(Refuse) or the test's end closes it
	}
	l.mu.Lock()
	delete(l.conns, p)
	l.mu.Unlock()
	dst.Close()
	src.Close()
}
