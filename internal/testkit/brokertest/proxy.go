package brokertest

import (
	"io"
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
	down   bool // refuse connections: the network is out
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
	p := &Proxy{URL: "mqtt://" + ln.Addr().String(), target: u.Host, ln: ln, conns: map[net.Conn]bool{}}
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

// pipe copies one direction; when either side ends, both are closed.
func (p *Proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
	dst.Close()
	src.Close()
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
