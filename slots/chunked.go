package slots

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/otad/otad/durable"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
	"github.com/otad/otad/sha256pair"
)

// ChunkedJob describes a chunked payload (docs/contract/chunked.md) and where it goes. The
// embedded Job gives the target, the image's Size and SHA256, read-back,
// retries, schemes, client and progress; its URL is the store's. Its
// Compression and DownloadSize are not used: the index says how each chunk
// is stored, and store_size bounds what is fetched.
type ChunkedJob struct {
	Job
	IndexURL string
	// Expect is what the signed manifest says of the index and the store.
	Expect payload.Expect
	// Offer identifies the offer (the manifest's sha256), recorded in the
	// checkpoint for the record: any offer of the same image, chunked by the
	// same index, resumes from it (checkpointKey).
	Offer string
	// StateDir keeps the checkpoint, the indexes of the images written and
	// the booted slot's chunk list (in its subdirectory "chunked").
	StateDir string
	// BootedImage is the sha256 of the image the booted slot holds, as the
	// journal says; empty when unknown (a factory image): the booted slot is
	// then hashed once, chunk by chunk, and its first bytes as the deltas
	// entries' older images.
	BootedImage string
	// StateFS is where the files in StateDir are replaced; nil is the
	// operating system's.
	StateFS durable.FS
	// CheckpointBytes, when positive, is the image bytes between
	// checkpoints, however soon they come (a small image crosses several);
	// zero: every 8 MiB, at most four a second.
	CheckpointBytes int64
	// Log gets the install's warnings (deltas given up for the store, a
	// checkpoint or kept index not written); nil discards them.
	Log *slog.Logger
}

// chunkTuning holds the chunked install's knobs; tests try others.
type chunkTuning struct {
	lanes    int // range requests in flight
	decoders int // chunks decompressed at once, by the lanes' one decoder
	// laneBytes is a lane's ring (chunkring.go) when the network brings at
	// least half of the image whole and the install has two CPUs or more;
	// laneBytesAided otherwise: deltas' and the booted slot's chunks wait on
	// the assembler's rebuilding, not on the lanes, and on one CPU lanes far
	// ahead only take it from the writer while the storage idles, so a
	// deeper ring would only hold memory (ringFor).
	laneBytes, laneBytesAided int
	cpus                      int   // the CPUs the install may use
	localBytes                int   // buffers for chunks read from the slots
	batchBytes                int   // bytes per vectored write through the page cache
	stageBytes                int   // bytes per O_DIRECT write (a staging buffer, chunkstage.go)
	stageBufs                 int   // staging buffers: one filling while the others are written
	maxSpan                   int64 // bytes per range request
	// A checkpoint is due after checkpointBytes of image once checkpointGap
	// has passed since the last, and after checkpointEvery in any case: on a
	// slow link every few MiB, on a fast one a few times a second, where
	// each sync of the slot would otherwise cost more than it saves.
	// pairHash: with read-back off, the assembler checks each raw chunk
	// from the network and hashes it into the image in one pass
	// (imageHash.checked), where sha256pair.Fast.
	pairHash        bool
	checkpointBytes int64
	checkpointGap   time.Duration
	checkpointEvery time.Duration
	// slack is how far past the last chunk the target holds a restart still
	// looks: a power cut can lose some writes before others.
	slack int64
	// wrapBooted, when set, wraps the booted slot's reads (tests count them).
	wrapBooted func(bootedSlot) bootedSlot
	// beforeCheckpoint runs after the slot is synced and before the
	// checkpoint file is replaced; an error stops the install there, as a
	// power cut would (tests).
	beforeCheckpoint func(next int) error
}

func defaultChunkTuning() chunkTuning {
	return chunkTuning{
		lanes:           3,
		decoders:        1,
		laneBytes:       1 << 20,
		laneBytesAided:  384 << 10,
		cpus:            runtime.NumCPU(),
		localBytes:      512 << 10,
		batchBytes:      1 << 20,
		stageBytes:      512 << 10,
		stageBufs:       3,
		maxSpan:         1 << 20,
		pairHash:        sha256pair.Fast(),
		checkpointBytes: 8 << 20,
		checkpointGap:   250 * time.Millisecond,
		checkpointEvery: 2 * time.Second,
		slack:           16 << 20,
	}
}

// WriteChunked installs a chunked payload into the target slot: it fetches
// and checks the index, then takes every chunk from the checkpoint on from
// the first source that has it (the target slot, zeros, the booted slot, the
// network), checks its hash before writing it, records a durable checkpoint
// every few MiB or seconds, and with Readback ends with a read-back of the
// slot against the index and sha256 (without, it hashes the image as it is
// written). The checkpoint, the kept index and the booted slot's chunk list
// are aids: one not written is a warning (Log). A restart of any offer of the same image resumes at
// the checkpoint. It returns nil only when all
// of that succeeded, otherwise an *ota.Error with a docs/contract/installing.md code.
func WriteChunked(ctx context.Context, job ChunkedJob) error {
	return writeChunked(ctx, job, defaultTuning(), defaultChunkTuning())
}

func writeChunked(ctx context.Context, job ChunkedJob, tun tuning, ct chunkTuning) error {
	if job.CheckpointBytes > 0 {
		ct.checkpointBytes, ct.checkpointGap = job.CheckpointBytes, 0
	}
	job.watchWaits()
	in := &chunkInstall{job: &job, tun: &tun, ct: &ct, log: job.Log}
	if in.log == nil {
		in.log = slog.New(slog.DiscardHandler)
	}
	err := in.run(ctx)
	if err != nil && ctx.Err() != nil && ota.CodeOf(err) != ota.CodeCancelled {
		// The caller's cancellation caused whatever failed.
		return ota.Wrap(ota.CodeCancelled, fmt.Errorf("write %s to %s: %w (%w)", job.URL, job.targetName(), ctx.Err(), err))
	}
	return err
}

// chunkInstall is one run of a chunked install.
type chunkInstall struct {
	job      *ChunkedJob
	tun      *tuning
	ct       *chunkTuning
	expected []byte
	x        *payload.Index
	tgt      chunkSink
	booted   bootedSlot // the booted slot, nil without one
	state    chunkState
	key      string
	plan     *payload.Plan
	resumed  *checkpoint // where this run starts; nil: from chunk 0
	log      *slog.Logger
	// bootedImage is the sha256 of the image the booted slot holds: the
	// journal's, or found by the scan (bootedChunks).
	bootedImage string
	bootedSize  int64 // the booted slot's bytes
	// placed: the booted slot holds the image a placed deltas entry is for and
	// has no kept index: the delta index says where to read, no scan (placed.go).
	placed  bool
	delta   *payload.Delta        // deltas against the booted image; nil: none
	deltaAt int                   // its entry in payload.chunks.deltas
	deltaOf ota.Delta             // that entry
	dd      *payload.DeltaDecoder // decodes them, with the booted slot's bytes
	// pd and hist decode a zstd-prefix store's chunks with the image's last
	// bytes (chunkprefix.go); nil for other stores. nextZstd is the first
	// zstd chunk after those remembered so far.
	pd       *payload.PrefixDecoder
	hist     *payload.History
	nextZstd int

	fetched  atomic.Int64 // store and index bytes from the network, this run
	progress *reporter
	counts   checkpoint // the totals once written
	written  *imageHash // the image as written, without a read-back
}

func (in *chunkInstall) run(ctx context.Context) error {
	job := in.job
	var err error
	if in.expected, err = job.check(); err != nil {
		return err
	}
	if err := job.checkChunks(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return ota.Wrap(ota.CodeCancelled, fmt.Errorf("write %s to %s: %w", job.URL, job.targetName(), err))
	}
	// The index first: a hostile one is refused before the slot is opened.
	if in.x, err = fetchIndex(ctx, job, in.tun, &in.fetched); err != nil {
		return err
	}
	bufs, release, err := in.buffers()
	if err != nil {
		return err
	}
	defer release()
	// It reads the slot back and keeps a checkpoint of what is on storage:
	// a File, or a Target whose Writer can sync.
	if in.tgt, err = openChunkSink(job, in.tun, bufs.scratch); err != nil {
		return err
	}
	defer in.tgt.close()
	if in.tgt.size() < job.Size {
		return ota.Wrap(ota.CodeSizeMismatch, fmt.Errorf("slot %s holds %d bytes, payload %s is %d bytes", job.targetName(), in.tgt.size(), job.URL, job.Size))
	}
	in.state = chunkState{dir: filepath.Join(job.StateDir, chunkDirName), fs: job.StateFS, log: in.log}
	in.state.init()
	in.state.stageIndex(in.x)
	in.key = job.checkpointKey(in.tgt.name())
	in.resumed = in.state.loadCheckpoint(in.key)
	defer func() {
		if in.booted != nil {
			in.booted.Close()
		}
		if in.dd != nil {
			in.dd.Close()
		}
		if in.pd != nil {
			in.pd.Close()
		}
	}()
	if err := in.makePlan(ctx, bufs.scratch); err != nil {
		return err
	}
	if in.resumed == nil {
		// Written before the first byte: a crash from here on resumes, and a
		// restart knows the target may hold chunks of this install.
		in.state.saveCheckpoint(&checkpoint{Key: in.key, Offer: job.Offer})
	}
	path := ota.PathChunked
	if in.plan.DeltaBytes > 0 {
		path = ota.PathDelta
	}
	in.progress = newReporter(job.Progress, in.tun.progressEvery, job.Size, in.resumed, path)
	if err := in.write(ctx, bufs); err != nil {
		return err
	}
	// Written: the plan (24 bytes a chunk) is garbage for the read-back to
	// reuse rather than a heap that grows under it.
	in.plan = nil
	if job.Readback {
		if err := in.readBack(ctx, bufs.readback, in.counts); err != nil {
			return err
		}
	} else if err := in.written.check(); err != nil {
		return err
	}
	if err := in.tgt.done(job.SHA256); err != nil {
		return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("commit %s: %w", job.targetName(), err))
	}
	in.state.keepIndex(job.SHA256, in.x, job.BootedImage)
	in.state.removeCheckpoint()
	return nil
}

// checkChunks checks what Job.check does not: the manifest's chunk values.
func (j *ChunkedJob) checkChunks() error {
	if err := j.Expect.Validate(); err != nil {
		return err
	}
	switch {
	case j.Expect.ImageSize != j.Size:
		return ota.FieldErrorf(ota.CodeIndexMismatch, "payload.size", "%d, the index expectation says %d", j.Size, j.Expect.ImageSize)
	case j.Expect.IndexSize > payload.MaxIndexSize:
		return ota.FieldErrorf(ota.CodeIndexMismatch, "payload.chunks.index_size", "%d bytes, more than this device holds (%d)", j.Expect.IndexSize, payload.MaxIndexSize)
	case j.IndexURL == "":
		return ota.Wrap(ota.CodeDownloadFailed, fmt.Errorf("job for %s: no index url", j.targetName()))
	case j.StateDir == "":
		return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("job for %s: no state directory for the checkpoint", j.targetName()))
	}
	return nil
}

// checkpointKey names what a checkpoint is valid for: this image, chunked
// by this index (its digest), into this slot; not the offer, so that the same
// image signed again or published anew resumes where the last offer of it
// stopped (docs/contract/chunked.md). Anything else starts over.
func (j *ChunkedJob) checkpointKey(target string) string {
	h := sha256.New()
	for _, s := range []string{"otad chunked checkpoint 2", j.SHA256, j.Expect.IndexSHA256,
		strconv.FormatInt(j.Expect.ChunkSize, 10), strconv.FormatInt(j.Size, 10), target} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// makePlan decides each chunk's source from the checkpoint on. After a
// restart, the target is read from the checkpoint on, and a chunk whose hash
// matches counts as written: what was written after the last checkpoint
// before the crash, up to slack past the last chunk found.
func (in *chunkInstall) makePlan(ctx context.Context, scratch []byte) error {
	have, err := in.bootedChunks(ctx)
	if err != nil {
		return err
	}
	pi := payload.PlanInput{Booted: have, MaxSpan: in.ct.maxSpan}
	if in.booted != nil {
		// Decoded with the booted slot's bytes, once the slot's image is known.
		if err := in.fetchDelta(ctx); err != nil {
			return err
		}
		if pi.Booted, err = in.placedOrScan(ctx, have); err != nil {
			return err
		}
		if in.delta != nil {
			if in.dd, err = payload.NewDeltaDecoder(in.x); err != nil {
				return ota.Wrap(ota.CodeWriteFailed, err)
			}
			pi.Delta = in.delta
		}
	}
	if cp := in.resumed; cp != nil {
		if cp.Next < 0 || cp.Next > in.x.Count() {
			in.resumed = nil
		} else {
			if !in.job.Readback {
				in.distrustCheckpoint(ctx, cp, scratch)
			}
			pi.Next = cp.Next
			held := in.targetHeld(ctx, cp.Next, scratch)
			pi.TargetHas = func(i int) bool { return held[i-cp.Next] }
		}
	}
	in.plan, err = payload.MakePlan(in.x, pi)
	if err != nil {
		return ota.Wrap(ota.CodeWriteFailed, err)
	}
	if err := in.planPrefix(pi, scratch); err != nil {
		return err
	}
	if in.dd != nil && in.pd != nil {
		// Both decode in the assembler, one chunk at a time.
		in.dd.Share(in.pd)
	}
	// The planning's garbage (the booted slot's kept index, decompressed,
	// and its reads) back to the system before the buffers fill: kept by
	// the runtime until its scavenger comes to it, it would stand beside
	// them at the install's peak (docs/contract/chunked.md, memory).
	debug.FreeOSMemory()
	return ctx.Err()
}

// distrustCheckpoint moves cp back to the first chunk before it that the
// target does not hold. Without the read-back nothing else would check the
// chunks a checkpoint vouches for, and across a restart neither the file
// (planted, or of a run whose writes the storage lost) nor the slot
// (written by someone else in between) is above suspicion.
func (in *chunkInstall) distrustCheckpoint(ctx context.Context, cp *checkpoint, scratch []byte) {
	for i := range cp.Next {
		if c := in.x.Chunk(i); ctx.Err() != nil || !in.targetHolds(c, scratch) {
			cp.Next, cp.Done = i, c.Offset
			return
		}
	}
}

// targetHeld reads the target from chunk next on and reports which chunks
// it holds, stopping slack bytes past the last one it holds.
func (in *chunkInstall) targetHeld(ctx context.Context, next int, scratch []byte) []bool {
	held := make([]bool, in.x.Count()-next)
	end := in.x.ImageSize()
	if next < in.x.Count() {
		end = in.x.Chunk(next).Offset
	}
	for i := next; i < in.x.Count() && ctx.Err() == nil; i++ {
		c := in.x.Chunk(i)
		if c.Offset >= end+in.ct.slack {
			break
		}
		if in.targetHolds(c, scratch) {
			held[i-next], end = true, c.Offset+int64(c.Length)
		}
	}
	return held
}

// targetHolds reports whether the target's bytes of c are c's: hashing as the index
// says, or zeros (read in parts: a zero run may be longer than buf).
func (in *chunkInstall) targetHolds(c payload.Chunk, buf []byte) bool {
	if c.Kind != payload.KindZero {
		b, err := in.tgt.read(c.Offset, c.Length, buf)
		return err == nil && c.Holds(b)
	}
	step := int(in.x.MaxChunk()) // what buf holds at any offset
	for off := int64(0); off < int64(c.Length); off += int64(step) {
		b, err := in.tgt.read(c.Offset+off, int(min(int64(step), int64(c.Length)-off)), buf)
		if err != nil || !payload.AllZero(b) {
			return false
		}
	}
	return true
}

// readChunk reads n bytes at off into buf, dropping cached pages around a
// buffered read as the read-back does, so that what is read comes from
// storage. With O_DIRECT it reads whole aligned blocks around them: buf must
// hold n rounded up to the alignment, and with an offset that is not aligned
// (content-defined chunks) two blocks more (bufSize).
func readChunk(f *os.File, direct bool, off int64, n int, buf []byte) ([]byte, error) {
	lo := off
	if direct {
		lo = off / alignment * alignment
	}
	skip := int(off - lo)
	r := &readReq{off: lo, n: int64(skip + n), buf: buf, done: make(chan struct{})}
	readRegion(f, direct, r)
	if r.got < skip+n {
		if r.err == nil {
			r.err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read %d bytes at offset %d of %s: %w", n, off, f.Name(), r.err)
	}
	return buf[skip : skip+n], nil
}
