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
	q := &queue{fn: fn, done: make(chan struct{})}
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

// backlog is a generous time for what is queued to be handled, for
// waits that follow it (Sync).
func (q *queue) backlog() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	// A handler takes well under 100 µs a message; allow ten times that.
	return time.Duration(len(q.items)) * time.Millisecond
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
