package mqtt

import (
	"sync"
	"time"
)

// queue hands a session's messages to its handler in order, on a
// goroutine of its own, so that paho goes on reading (acknowledgements
// included) while the handler works. It holds at most maxQueued bytes of
// payload; beyond that push waits, and paho with it.
type queue struct {
	fn func(Message)

	mu     sync.Mutex
	cond   *sync.Cond
	items  []item
	bytes  int
	closed bool
	last   time.Time // when a message last arrived
	done   chan struct{}
}

// item is a message, or a marker that is closed when reached (Sync).
type item struct {
	msg     Message
	reached chan struct{}
}

// maxQueued bounds the bytes waiting for the handler.
const maxQueued = 32 << 20

func newQueue(fn func(Message)) *queue {
	q := &queue{fn: fn, done: make(chan struct{}), last: time.Now()}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *queue) start() { go q.run() }

func (q *queue) push(it item) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.bytes > maxQueued && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return
	}
	q.items = append(q.items, it)
	q.bytes += len(it.msg.Payload)
	q.last = time.Now()
	q.cond.Broadcast()
}

func (q *queue) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		for len(q.items) == 0 && !q.closed {
			q.cond.Wait()
		}
		if q.closed {
			q.mu.Unlock()
			return
		}
		it := q.items[0]
		q.items[0] = item{}
		q.items = q.items[1:]
		q.bytes -= len(it.msg.Payload)
		q.cond.Broadcast()
		q.mu.Unlock()
		if it.reached != nil {
			close(it.reached)
			continue
		}
		q.fn(it.msg)
	}
}

// quietSince is how long since a message arrived or since from, whichever
// is later; zero while the handler works through a backlog.
func (q *queue) quietSince(from time.Time) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) > 0 {
		return 0
	}
	if q.last.After(from) {
		from = q.last
	}
	return time.Since(from)
}

// close stops the handler calls: none after close returns.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.items = nil
	q.cond.Broadcast()
	q.mu.Unlock()
	<-q.done
}
