package crashstate

import (
	"path"
	"sync"

	"github.com/otad/otad/ota"
)

// Kind is what an operation does.
type Kind uint8

const (
	// OpCreate links a new, empty inode at Name.
	OpCreate Kind = iota
	// OpWrite writes Data at Off of Inode.
	OpWrite
	// OpSync makes Inode's earlier writes durable (fsync, fdatasync).
	OpSync
	// OpRename moves the link Name to To.
	OpRename
	// OpRemove unlinks Name.
	OpRemove
	// OpSyncDir makes the earlier creations, renames and removals in Dir durable.
	OpSyncDir
	// OpMark changes nothing on storage: it records what happened (a boot,
	// an event published) for the invariants.
	OpMark
)

func (k Kind) String() string {
	return [...]string{"create", "write", "sync", "rename", "remove", "syncdir", "mark"}[k]
}

// Op is one operation of a trace. Names are relative to the device's root,
// slash-separated.
type Op struct {
	Kind     Kind
	Inode    int
	Name, To string
	Dir      string
	Off      int64
	Data     []byte
	Mark     Mark
}

// dirs are the directories whose sync makes the op durable.
func (o Op) dirs() []string {
	switch o.Kind {
	case OpCreate, OpRemove:
		return []string{path.Dir(o.Name)}
	case OpRename:
		if path.Dir(o.Name) == path.Dir(o.To) {
			return []string{path.Dir(o.To)}
		}
		return []string{path.Dir(o.Name), path.Dir(o.To)}
	}
	return nil
}

// MarkKind says what a mark records.
type MarkKind uint8

const (
	// MarkBoot: the bootloader picked Slot (DefaultEnv: from its built-in
	// environment, the saved one being unreadable).
	MarkBoot MarkKind = iota + 1
	// MarkEvent: the agent published Event.
	MarkEvent
)

// Mark is what an OpMark records.
type Mark struct {
	Kind       MarkKind
	Slot       ota.Slot
	DefaultEnv bool
	Event      ota.Event
}

// Trace records operations in the order they reach the storage layer, and
// the live namespace (which inode each name links) to name their targets.
// A nil *Trace records nothing.
type Trace struct {
	mu    sync.Mutex
	ops   []Op
	names map[string]int
	next  int
}

// newTrace starts a trace on img's namespace.
func newTrace(img *Image) *Trace {
	t := &Trace{names: map[string]int{}}
	for n, id := range img.Names {
		t.names[n] = id
		t.next = max(t.next, id+1)
	}
	for id := range img.Data {
		t.next = max(t.next, id+1)
	}
	return t
}

// Ops is what was recorded so far.
func (t *Trace) Ops() []Op {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Op(nil), t.ops...)
}

func (t *Trace) add(op Op) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch op.Kind {
	case OpCreate:
		op.Inode = t.next
		t.next++
		t.names[op.Name] = op.Inode
	case OpRename:
		if id, ok := t.names[op.Name]; ok {
			delete(t.names, op.Name)
			t.names[op.To] = id
		}
	case OpRemove:
		delete(t.names, op.Name)
	case OpWrite, OpSync:
		for n, id := range t.names {
			if id == op.Inode {
				op.Name = n
			}
		}
	}
	t.ops = append(t.ops, op)
}

// create records a new file and returns its inode.
func (t *Trace) create(name string) int {
	if t == nil {
		return -1
	}
	t.add(Op{Kind: OpCreate, Name: name})
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.names[name]
}

// inode is the inode name links now, -1 when none.
func (t *Trace) inode(name string) int {
	if t == nil {
		return -1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.names[name]; ok {
		return id
	}
	return -1
}

func (t *Trace) write(inode int, off int64, b []byte) {
	if t == nil || inode < 0 {
		return
	}
	t.add(Op{Kind: OpWrite, Inode: inode, Off: off, Data: append([]byte(nil), b...)})
}

func (t *Trace) sync(inode int) {
	if t == nil || inode < 0 {
		return
	}
	t.add(Op{Kind: OpSync, Inode: inode})
}

func (t *Trace) mark(m Mark) {
	if t == nil {
		return
	}
	t.add(Op{Kind: OpMark, Mark: m})
}
