package crashstate

import (
	"context"
	"fmt"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/durable"
	"github.com/otad/otad/ota"
)

// Options say what Explore explores.
type Options struct {
	Scenarios []Scenario
	Model     Model
	// Sample, when positive, explores every state of the first level and
	// then the second level's in a seeded order, until Sample distinct
	// states were explored in all. Zero explores them all.
	Sample  int
	Workers int
	// Dir is where the rigs keep their files.
	Dir string
	// BrokenFS and BrokenDisk, when set, break the product on purpose: the
	// journal's and the chunked state's file system, the boot environment's
	// disk (the tests that show the explorer catches a fault).
	BrokenFS   func(durable.FS) durable.FS
	BrokenDisk func(bootctl.Disk) bootctl.Disk
	// Depth 2 explores, besides a power cut at every point of the update,
	// a second one at every point of the recovery from each state.
	Depth int
	// Log, when set, is told each scenario's figures as it ends.
	Log func(string)
}

// Violation is a state in which an invariant did not hold.
type Violation struct {
	State    State
	Depth    int    // 1: one power cut; 2: a second one during the recovery
	Op       string // the operation the power was cut before
	Messages []string
}

// ScenarioResult is what exploring one scenario found.
type ScenarioResult struct {
	Scenario   Scenario
	Ops        int // operations in the recorded update
	Points     int // points of the trace a state was explored at
	States     int // distinct states explored, each checked
	Runs       int // of them run; the others the agent and bootloader could not tell from one run
	Violations []Violation
	Ends       map[string]int // how the explored states' updates ended
	Wall       time.Duration
}

func (s ScenarioResult) String() string {
	var ends []string
	for _, k := range slices.Sorted(maps.Keys(s.Ends)) {
		ends = append(ends, fmt.Sprintf("%s %d", k, s.Ends[k]))
	}
	return fmt.Sprintf("%-32s %3d ops, %6d states (%5d runs) at %4d points, %d violations, %s (ends: %s)",
		s.Scenario, s.Ops, s.States, s.Runs, s.Points, len(s.Violations), s.Wall.Round(time.Millisecond), strings.Join(ends, ", "))
}

// Result is what Explore found.
type Result struct {
	Scenarios []ScenarioResult
	Wall      time.Duration
}

// States is how many states were explored in all.
func (r Result) States() int {
	n := 0
	for _, s := range r.Scenarios {
		n += s.States
	}
	return n
}

// Violations is how many states broke an invariant.
func (r Result) Violations() int {
	n := 0
	for _, s := range r.Scenarios {
		n += len(s.Violations)
	}
	return n
}

// Summary is the closing line of make crash.
func (r Result) Summary() string {
	return fmt.Sprintf("crash: %d states explored in %d scenarios, %d violations", r.States(), len(r.Scenarios), r.Violations())
}

// Explore records a whole update of each scenario and checks every state
// the model gives (or a sample of them).
func Explore(ctx context.Context, fx *Fixture, opt Options) (Result, error) {
	start := time.Now()
	var res Result
	if opt.Workers < 1 {
		opt.Workers = 1
	}
	for _, sc := range opt.Scenarios {
		sr, err := exploreOne(ctx, fx, sc, opt)
		if err != nil {
			return res, fmt.Errorf("%s: %w", sc, err)
		}
		res.Scenarios = append(res.Scenarios, sr)
		if opt.Log != nil {
			opt.Log(sr.String())
		}
	}
	res.Wall = time.Since(start)
	return res, nil
}

func (o Options) rig(sc Scenario, fx *Fixture, name string) (*Rig, error) {
	root := filepath.Join(o.Dir, strings.ReplaceAll(sc.String(), "/", "-"), name)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	r, err := NewRig(sc, fx, root)
	if err != nil {
		return nil, err
	}
	r.broken, r.brokenDisk = o.BrokenFS, o.BrokenDisk
	return r, nil
}

// record brings a new device to its first idle start, then records the
// whole update from there.
func record(ctx context.Context, r *Rig, offer []byte) (*Image, []Op, error) {
	factory, err := r.factoryImage()
	if err != nil {
		return nil, nil, err
	}
	out := r.run(ctx, factory, nil, nil)
	if out.failed() {
		return nil, nil, fmt.Errorf("first start: %v", out.Violations)
	}
	img, err := r.image(out.State)
	if err != nil {
		return nil, nil, err
	}
	tr := newTrace(img)
	out = r.run(ctx, img, tr, offer)
	if vs, _ := r.judge(out, nil); len(vs) > 0 && r.broken == nil && r.brokenDisk == nil {
		return nil, nil, fmt.Errorf("the update without a power cut: %v", vs)
	}
	ops := tr.Ops()
	if (r.sc.End == Cancel || r.sc.End == MarkActive) && !slices.ContainsFunc(ops, func(op Op) bool {
		return op.Kind == OpMark && op.Mark.Kind == MarkEvent && op.Mark.Event.Code == ota.CodeCancelled && op.Mark.Event.Retryable
	}) {
		return nil, nil, fmt.Errorf("the update of %s: the operator's %s is not in its trace", r.sc, r.sc.End)
	}
	return img, ops, nil
}

// job is one state to explore: its image, the operations of its level
// (ops[s.K] is the one the power was cut before) and those before them
// (prior: the levels above), whose marks the invariants read.
type job struct {
	s     State
	img   *Image
	ops   []Op
	prior []Op
	deep  bool // record the run, to explore the states of its recovery
}

// recovery is the recorded run from one state: its states are explored
// as the second level (a power cut during the recovery from a power cut).
type recovery struct {
	base  *Image
	ops   []Op
	prior []Op
}

// explorer is one scenario's exploration under way.
type explorer struct {
	opt   Options
	offer []byte
	seed  maphash.Seed
	rigs  chan *Rig
	wg    sync.WaitGroup

	mu      sync.Mutex
	seen    map[[2]uint64]bool
	verdict map[[2]uint64]*Outcome // by what the agent and the bootloader can see
	sr      *ScenarioResult
	points  map[string]bool
	deep    []recovery // a reservoir of the first level's recoveries
	// recorded counts the recoveries offered to it; pick draws their places.
	recorded int
	pick     *rand.Rand
}

func exploreOne(ctx context.Context, fx *Fixture, sc Scenario, opt Options) (ScenarioResult, error) {
	start := time.Now()
	sr := ScenarioResult{Scenario: sc, Ends: map[string]int{}}
	r0, err := opt.rig(sc, fx, "record")
	if err != nil {
		return sr, err
	}
	e := &explorer{opt: opt, offer: fx.offer(sc), seed: maphash.MakeSeed(), rigs: make(chan *Rig, opt.Workers),
		seen: map[[2]uint64]bool{}, verdict: map[[2]uint64]*Outcome{}, sr: &sr, points: map[string]bool{},
		pick: rand.New(rand.NewPCG(opt.Model.Seed, 22))}
	initial, ops, err := record(ctx, r0, e.offer)
	if err != nil {
		return sr, err
	}
	sr.Ops = len(ops)
	e.rigs <- r0
	for w := 1; w < opt.Workers; w++ {
		r, err := opt.rig(sc, fx, fmt.Sprintf("w%d", w))
		if err != nil {
			return sr, err
		}
		e.rigs <- r
	}
	// The first level: a power cut at each point of the update.
	opt.Model.Walk(initial, ops, e.seed, func(s State, build func() *Image) bool {
		return e.dispatch(ctx, job{s: s, img: build(), ops: ops, deep: opt.Depth > 1})
	})
	e.wg.Wait()
	// The second: a power cut at each point of the recovery from each state
	// of the first. A sample takes each state with twice the chance that
	// brings it to its size, the recoveries in a seeded order, until the
	// size is reached. States the agent cannot tell apart count once, so a
	// draw can fall short: a second pass then takes those the first left,
	// in the same order, until the size is reached or none is left.
	r := rand.New(rand.NewPCG(opt.Model.Seed, 21))
	r.Shuffle(len(e.deep), func(i, j int) { e.deep[i], e.deep[j] = e.deep[j], e.deep[i] })
	total := 0
	for _, rc := range e.deep {
		total += len(opt.Model.States(rc.ops))
	}
	chance := 1.0
	if opt.Sample > 0 && total > 0 {
		chance = min(1, 2*float64(opt.Sample-sr.States)/float64(total))
	}
	for pass := 0; pass < 2; pass++ {
		if pass == 1 {
			e.wg.Wait()
			if chance == 1 || e.explored() >= opt.Sample || ctx.Err() != nil {
				break
			}
			chance = 1
		}
		if !e.second(ctx, r, chance) {
			break
		}
	}
	e.wg.Wait()
	sr.Points = len(e.points)
	slices.SortFunc(sr.Violations, func(a, b Violation) int { return a.State.K - b.State.K })
	sr.Wall = time.Since(start)
	return sr, ctx.Err()
}

// second walks the recoveries of the first level, taking each state with
// the given chance; false once the sample is full or ctx has ended.
func (e *explorer) second(ctx context.Context, r *rand.Rand, chance float64) bool {
	opt := e.opt
	for _, rc := range e.deep {
		more := true
		opt.Model.Walk(rc.base, rc.ops, e.seed, func(s State, build func() *Image) bool {
			if opt.Sample > 0 && e.explored() >= opt.Sample {
				more = false
				return false
			}
			if chance < 1 && r.Float64() >= chance {
				return true
			}
			more = e.dispatch(ctx, job{s: s, img: build(), ops: rc.ops, prior: rc.prior})
			return more
		})
		if !more {
			return false
		}
	}
	return true
}

// explored is how many distinct states were explored so far.
func (e *explorer) explored() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sr.States
}

// dispatch explores j on the next free rig; false once ctx has ended.
func (e *explorer) dispatch(ctx context.Context, j job) bool {
	if ctx.Err() != nil {
		return false
	}
	var r *Rig
	select {
	case r = <-e.rigs:
	case <-ctx.Done():
		return false
	}
	e.wg.Go(func() {
		defer func() { e.rigs <- r }()
		e.explore(ctx, r, j)
	})
	return true
}

// explore checks one state: told apart from those seen, run (or judged by
// the run of one the agent and the bootloader cannot tell from it).
func (e *explorer) explore(ctx context.Context, r *Rig, j job) {
	img := j.img
	prior := append(slices.Clip(j.prior), j.ops[:j.s.K]...)
	ph := marksKey(e.seed, prior)
	// A run depends on the image alone; what came before is judged apart.
	key, agentKey := [2]uint64{img.key(e.seed, false), ph}, [2]uint64{img.key(e.seed, true), 0}
	e.mu.Lock()
	if e.seen[key] {
		e.mu.Unlock()
		return
	}
	e.seen[key] = true
	out, shared := e.verdict[agentKey]
	e.mu.Unlock()
	var tr *Trace
	if !shared {
		if j.deep {
			tr = newTrace(img)
		}
		out = r.run(ctx, img, tr, e.offer)
	}
	vs, end := r.judge(out, prior)
	e.mu.Lock()
	defer e.mu.Unlock()
	// The verdict is kept for the states that share it; the storage it
	// ended on (the slots' bytes) is not needed again.
	out.State = nil
	e.verdict[agentKey] = out
	e.sr.States++
	e.points[fmt.Sprint(len(j.prior), j.s.K)] = true
	e.sr.Ends[end]++
	if len(vs) > 0 {
		v := Violation{State: j.s, Messages: vs, Depth: 1}
		if len(j.prior) > 0 {
			v.Depth = 2
		}
		if j.s.K < len(j.ops) {
			v.Op = describe(j.ops[j.s.K])
		}
		e.sr.Violations = append(e.sr.Violations, v)
	}
	if !shared {
		e.sr.Runs++
		if tr != nil && len(vs) == 0 {
			e.keepRecovery(recovery{base: img, ops: tr.Ops(), prior: prior})
		}
	}
}

// maxRecoveries bounds the recoveries kept for the second level: a
// seeded reservoir of them, not every one (a chunked scenario records
// over 10,000, a few hundred KiB each).
const maxRecoveries = 2000

// keepRecovery adds rc to the reservoir (e.mu held).
func (e *explorer) keepRecovery(rc recovery) {
	e.recorded++
	if len(e.deep) < maxRecoveries {
		e.deep = append(e.deep, rc)
		return
	}
	if i := e.pick.IntN(e.recorded); i < maxRecoveries {
		e.deep[i] = rc
	}
}

// marksKey identifies what the marks of ops say happened before.
func marksKey(seed maphash.Seed, ops []Op) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, op := range ops {
		if op.Kind != OpMark {
			continue
		}
		m := op.Mark
		fmt.Fprintf(&h, "%d %s %t %d %s %s %s %s|", m.Kind, m.Slot, m.DefaultEnv, m.Event.Seq, m.Event.SHA256, m.Event.From, m.Event.To, m.Event.Result)
	}
	return h.Sum64()
}

// describe names an operation for a message.
func describe(op Op) string {
	switch op.Kind {
	case OpWrite:
		return fmt.Sprintf("write %d bytes at %d of %s", len(op.Data), op.Off, op.Name)
	case OpSync:
		return "sync " + op.Name
	case OpCreate, OpRemove:
		return fmt.Sprintf("%s %s", op.Kind, op.Name)
	case OpRename:
		return fmt.Sprintf("rename %s to %s", op.Name, op.To)
	case OpSyncDir:
		return "sync dir " + op.Dir
	}
	return op.Kind.String()
}
