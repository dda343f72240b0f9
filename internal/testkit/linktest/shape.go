package linktest

import (
	"math/rand/v2"
	"net"
	"time"
)

// Shape is a slow and lossy link, as netem would make it (rate, delay, loss),
// for the connections made after SetShape.
type Shape struct {
	// Rate is the link's bytes per second towards the client, shared by
	// nothing: each connection gets it (0: unlimited).
	Rate int64
	// Delay is the one-way latency, each way: a round trip takes 2 × Delay.
	Delay time.Duration
	// Loss is the share of 1448-byte segments towards the client lost. A
	// proxy above TCP cannot drop one: it holds the stream for what the
	// retransmission costs the sender, a round trip (2 × Delay) and at least
	// 200 ms, Linux's least retransmission timeout, as a lost segment does
	// at the tail of a burst; the segments after it wait behind it.
	Loss float64
	// ResetEvery, when positive, closes a connection after about that many
	// bytes towards the client (at random, between half and one and a half
	// times it): the client sees a reset and resumes, as a link that drops
	// for long enough makes it.
	ResetEvery int64
	// Seed makes the losses and resets repeatable.
	Seed uint64
}

// segment is TCP's payload in a 1500-byte Ethernet frame, with timestamps.
const segment = 1448

// minRTO is Linux's least retransmission timeout.
const minRTO = 200 * time.Millisecond

// SetShape shapes the connections made from now on (nil: none, only Rate).
func (l *Link) SetShape(s *Shape) { l.shape.Store(s) }

// burst is bytes read from one side, to be written to the other at due.
type burst struct {
	b   []byte
	due time.Time
}

// shaped carries src to dst through a delay line: each read leaves when the
// link's rate lets it (the bytes before it sent, plus the stalls of its lost
// segments) and arrives Delay later. The line holds about a bandwidth-delay
// product and a few reads more, then stops reading src, so TCP's own flow
// control pushes back on the sender as a full router queue would.
func (l *Link) shaped(p *pair, dst, src net.Conn, sh Shape, toClient bool) {
	n := 4
	if toClient && sh.Rate > 0 {
		n += int(sh.Rate * int64(sh.Delay) / int64(time.Second) / (16 << 10))
	}
	line := make(chan burst, n)
	go l.deliver(p, dst, src, line, toClient)
	rng := rand.New(rand.NewPCG(sh.Seed, uint64(time.Now().UnixNano())))
	if sh.Seed != 0 {
		rng = rand.New(rand.NewPCG(sh.Seed, 1))
	}
	resetAt := int64(-1)
	if toClient && sh.ResetEvery > 0 {
		resetAt = sh.ResetEvery/2 + rng.Int64N(sh.ResetEvery+1)
	}
	var free time.Time // when the link has sent what it was given
	var carried int64
	defer close(line)
	for {
		buf := make([]byte, 16<<10)
		k, err := src.Read(buf)
		if k > 0 {
			now := time.Now()
			leave := free
			if leave.Before(now) {
				leave = now
			}
			if toClient {
				leave = leave.Add(sh.stalls(rng, k)).Add(sh.serialize(k))
			}
			free = leave
			line <- burst{b: buf[:k], due: leave.Add(sh.Delay)}
			carried += int64(k)
			if resetAt >= 0 && carried >= resetAt {
				// Cut once what went before it arrived: a reset mid-stream.
				time.Sleep(time.Until(leave.Add(sh.Delay + 5*time.Millisecond)))
				if c, ok := p.client.(*net.TCPConn); ok {
					c.SetLinger(0) // a reset, not a close
				}
				p.client.Close()
				p.server.Close()
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// serialize is how long k bytes take at the link's rate.
func (sh Shape) serialize(k int) time.Duration {
	if sh.Rate <= 0 {
		return 0
	}
	return time.Duration(float64(k) / float64(sh.Rate) * float64(time.Second))
}

// stalls is what the losses among k bytes' segments cost the stream.
func (sh Shape) stalls(rng *rand.Rand, k int) time.Duration {
	if sh.Loss <= 0 {
		return 0
	}
	var d time.Duration
	for range (k + segment - 1) / segment {
		if rng.Float64() < sh.Loss {
			d += max(2*sh.Delay, minRTO)
		}
	}
	return d
}

// deliver writes each burst of the line to dst when it is due, counting what
// reaches the client; a blackholed pair lets nothing through.
func (l *Link) deliver(p *pair, dst, src net.Conn, line <-chan burst, toClient bool) {
	failed := false
	for b := range line {
		time.Sleep(time.Until(b.due))
		if p.dead.Load() || failed {
			continue
		}
		if _, err := dst.Write(b.b); err != nil {
			// Ends the reader too; the line drains until it does.
			failed = true
			src.Close()
			continue
		}
		if toClient {
			l.served.Add(int64(len(b.b)))
		}
	}
	if p.dead.Load() {
		return // the client's side stays open and silent, as pipe leaves it
	}
	l.mu.Lock()
	delete(l.conns, p)
	l.mu.Unlock()
	dst.Close()
	src.Close()
}
