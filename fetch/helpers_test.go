package fetch

import (
	"context"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/backoff"
)

// testData is n deterministic bytes.
func testData(n int, seed byte) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed, 2}).Read(b)
	return b
}

// readAll reads the whole download of r.
func readAll(t testing.TB, r Request) ([]byte, error) {
	t.Helper()
	src, err := Open(t.Context(), r)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return io.ReadAll(src)
}

// sleeps is an injected backoff.Policy.Sleep: it records and does not wait.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return ctx.Err()
}

func (s *sleeps) list() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.d)
}

func quickRetry(s *sleeps) backoff.Policy {
	return backoff.Policy{Attempts: 3, Base: 10 * time.Millisecond, Max: 40 * time.Millisecond, Sleep: s.sleep, Rand: func() float64 { return 0.5 }}
}
