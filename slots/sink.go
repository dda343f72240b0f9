package slots

import (
	"fmt"
	"io"

	"github.com/otad/otad/ota"
)

// sink is where Write puts the image: the slot's file or block device
// (target), or a slot in memory (MemSlot).
type sink interface {
	io.WriterAt
	// flusher makes written regions durable as the writer goes, publishing
	// how far they are, so the readback knows what it may read.
	flusher(lag int64, publish func(durable int64)) flusher
	// reader opens the slot for the readback: read fills one request;
	// direct says reads come from storage, not a cache.
	reader(noDirect bool, probe []byte) (read func(*readReq), direct bool, closeRead func() error, err error)
	close() error
}

// flusher is the writer's durability: advance after each chunk, finish once
// the whole image is written and hashed.
type flusher interface {
	advance(end int64) error
	finish(size int64) error
}

// openSink opens the job's slot for writing and checks the image fits. A
// slot in memory gets a smaller pipeline: its writes are copies, and a
// simulated fleet runs many installs at once.
func openSink(job *Job, tun *tuning) (sink, error) {
	if job.Slot != nil {
		if job.Target == "" {
			job.Target = job.Slot.name
		}
		*tun = tun.forMemory()
		return job.Slot.open(job)
	}
	t, err := openTarget(job.Target, job.Booted, tun.mountinfo)
	if err != nil {
		return nil, err
	}
	if t.size < job.Size {
		t.close()
		return nil, ota.Wrap(ota.CodeSizeMismatch, fmt.Errorf("slot %s holds %d bytes, payload %s is %d bytes", job.Target, t.size, job.URL, job.Size))
	}
	return t, nil
}

// forMemory is the pipeline for a slot in memory: two 256 KiB buffers and
// one for the readback instead of 12 MiB.
func (t tuning) forMemory() tuning {
	t.chunk, t.buffers, t.readChunk, t.readBufs = 256<<10, 2, 256<<10, 1
	return t
}

func (t *target) WriteAt(b []byte, off int64) (int, error) { return t.f.WriteAt(b, off) }

func (t *target) flusher(lag int64, publish func(int64)) flusher {
	return &syncer{fd: int(t.f.Fd()), name: t.path, lag: lag, rangeOK: true, publish: publish}
}

func (t *target) reader(noDirect bool, probe []byte) (func(*readReq), bool, func() error, error) {
	f, direct, err := openReadback(t, noDirect, probe)
	if err != nil {
		return nil, false, nil, err
	}
	return func(r *readReq) { readRegion(f, direct, r) }, direct, f.Close, nil
}

var _ sink = (*target)(nil)
