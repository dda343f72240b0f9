package brokertest

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a broker and can cut them all at once,
// as a network failure does: the broker sees the client go without a
// DISCONNECT (and publishes its will), the client sees its connection drop
// and reconnects through the proxy, which keeps listening.
type Proxy struct {
	URL string // mqtt://127.0.0.1:PORT, for the client

	target string
	ln     net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]bool
	mute   map[net.Conn]bool // connections nothing is written to any more (Stall)
	down   bool              // refuse connections: the network is out
}

// NewProxy listens on a free loopback port for the broker at brokerURL, until
// the test ends.
func NewProxy(t testing.TB, brokerURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{URL: "mqtt://" + ln.Addr().String(), target: u.Host, ln: ln, conns: map[net.Conn]bool{}, mute: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.Cut() })
	return p
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		var b net.Conn
		if !down {
			b, err = net.Dial("tcp", p.target)
		}
		if down || err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[b] = true, true
		p.mu.Unlock()
		go p.pipe(c, b)
		go p.pipe(b, c)
	}
}

// pipe copies one direction, dropping what goes to a muted side; when
// either side ends, both are closed.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			muted := p.mute[dst]
			p.mu.Unlock()
			if !muted {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	delete(p.mute, dst)
	p.mu.Unlock()
	dst.Close()
	src.Close()
}

// Stall keeps the connections open now but lets nothing through them any
// more, either way (no PUBACK, no PINGRESP): a broker that still holds a
// connection but stopped answering on it. New connections go through.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.mute[c] = true
	}
}

// Cut closes every connection through the proxy.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Down cuts every connection and refuses new ones until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.Cut()
}

// Up lets connections through again.
func (p *Proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}
