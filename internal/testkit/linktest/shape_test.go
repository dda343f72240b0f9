package linktest

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// sink is a TCP server that sends body to whoever connects, once it got a byte.
func sink(t *testing.T, body []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var b [1]byte
				if _, err := c.Read(b[:]); err == nil {
					c.Write(body)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// fetch asks through l and reads until the server or the link ends, timing it.
func fetch(t *testing.T, l *Link) ([]byte, time.Duration, error) {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Write([]byte{'?'}); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	return got, time.Since(start), err
}

// TestShape: the shaped link carries the bytes intact and never faster than its
// shape lets it: a round trip of latency, the rate's time, and a retransmission's
// stall for each segment lost (all of them, at loss 1); a link that resets cuts
// the connection after about ResetEvery bytes. Only lower bounds: a loaded machine
// makes it slower, never faster.
func TestShape(t *testing.T) {
	body := make([]byte, 256<<10)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	for _, tc := range []struct {
		name  string
		shape Shape
		size  int
		least time.Duration
		whole bool
	}{
		{"delay and rate", Shape{Rate: 1 << 20, Delay: 50 * time.Millisecond}, 256 << 10, 100*time.Millisecond + 250*time.Millisecond, true},
		{"every segment lost", Shape{Delay: 10 * time.Millisecond, Loss: 1, Seed: 7}, 10 * segment, 10 * minRTO, true},
		{"resets", Shape{Delay: time.Millisecond, ResetEvery: 32 << 10, Seed: 9}, 256 << 10, 2 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Start(sink(t, body[:tc.size]))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			l.SetShape(&tc.shape)
			got, took, err := fetch(t, l)
			t.Logf("%d bytes in %v (%v)", len(got), took, err)
			if !bytes.Equal(got, body[:len(got)]) {
				t.Fatal("the bytes changed on the way")
			}
			if tc.whole && (len(got) != tc.size || err != nil) || !tc.whole && (len(got) >= tc.size || len(got) < 16<<10 || err == nil) {
				t.Fatalf("%d of %d bytes came through", len(got), tc.size)
			}
			if took < tc.least {
				t.Fatalf("took %v, the shape takes at least %v", took, tc.least)
			}
			if l.Served() != int64(len(got)) {
				t.Fatalf("served %d, the client got %d", l.Served(), len(got))
			}
		})
	}
}
