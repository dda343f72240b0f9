package agent

import (
	"sync"

	"github.com/otad/otad/ota"
)

// inbox is the queue in front of the state machine. Puts never block.
type inbox struct {
	mu    sync.Mutex
	items []item
	wake  chan struct{}
}

type item struct {
	key     string // the network source (topic); "" for a waited-for install
	source  string // the waited-for install's source, for the log
	raw     []byte
	reply   chan ota.Outcome
	refused error // set: refused before any check (dropped unread)
	given   bool  // its payload is read from where a person gave it
}

// name is the offer's source as the log names it.
func (it item) name() string {
	if it.key != "" {
		return it.key
	}
	return it.source
}

func newInbox() *inbox { return &inbox{wake: make(chan struct{}, 1)} }

// maxPerSource bounds what one network source (topic) can queue before the
// loop takes it: the oldest goes first. Every queued offer is checked and
// the newest valid one wins, so the order of arrival does not decide.
const maxPerSource = 16

func (q *inbox) put(key string, raw []byte) { q.add(item{key: key, raw: raw}) }

func (q *inbox) putRefused(key string, err error) { q.add(item{key: key, refused: err}) }

func (q *inbox) add(it item) {
	key := it.key
	q.mu.Lock()
	if key != "" {
		n, first := 0, -1
		for i := range q.items {
			if q.items[i].key == key {
				if first < 0 {
					first = i
				}
				n++
			}
		}
		if n >= maxPerSource {
			q.items = append(q.items[:first], q.items[first+1:]...)
		}
	}
	q.items = append(q.items, it)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *inbox) requeue(items []item) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(append([]item(nil), items...), q.items...)
}

// hasLocal reports a queued local install, which someone waits for.
func (q *inbox) hasLocal() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, it := range q.items {
		if it.key == "" {
			return true
		}
	}
	return false
}

func (q *inbox) take() []item {
	q.mu.Lock()
	defer q.mu.Unlock()
	it := q.items
	q.items = nil
	return it
}
