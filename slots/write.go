package slots

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otad/otad/fetch"
	"github.com/otad/otad/ota"
)

// Write streams the job's payload into the target slot: download (resuming
// after transient failures), decompress, hash and write in large aligned
// chunks, syncing as it goes; then check size and sha256, fdatasync, and with
// Readback compare the slot's storage with the sha256 too. It returns nil only
// when all of that succeeded; otherwise an *ota.Error whose Code is a docs/contract/installing.md
// failure code. Memory use is fixed whatever the image size.
func Write(ctx context.Context, job Job) error {
	return write(ctx, job, defaultTuning())
}

func write(ctx context.Context, job Job, tun tuning) error {
	job.watchWaits()
	expected, err := job.check()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return ota.Wrap(ota.CodeCancelled, fmt.Errorf("write %s to %s: %w", job.URL, job.targetName(), err))
	}
	out, err := openSink(&job, &tun)
	if err != nil {
		return err
	}
	defer out.close()
	if job.Pipelined != nil && decodes(job.Compression) {
		defer job.Pipelined()()
	}
	// One mapping: the pipeline's buffers, then the readback's. With
	// read-back on, the pipeline has a buffer fewer: the readback's reads
	// take its memory, keeping a zstd or xz install within 16 MiB
	// (docs/design.md, "Writing a slot").
	total := tun.buffers * tun.chunk
	if job.Readback {
		if tun.rbBuffers > 0 {
			tun.buffers = tun.rbBuffers
			total = tun.buffers * tun.chunk
		}
		total += tun.readBufs * tun.readChunk
	}
	bufs, release, err := buffersFor(job.Target, 1, total)
	if err != nil {
		return ota.Wrap(ota.CodeWriteFailed, err)
	}
	defer release()
	p := &pipeline{
		job:       &job,
		tun:       &tun,
		out:       out,
		expected:  expected,
		free:      make(chan []byte, tun.buffers),
		full:      make(chan chunk, tun.buffers),
		durableCh: make(chan struct{}, 1),
	}
	for _, b := range split(bufs[0][:tun.buffers*tun.chunk], tun.buffers, tun.chunk) {
		p.free <- b
	}
	if job.Readback {
		p.readBufs = split(bufs[0][tun.buffers*tun.chunk:], tun.readBufs, tun.readChunk)
	}
	err = p.run(ctx)
	if err != nil && ctx.Err() != nil && ota.CodeOf(err) != ota.CodeCancelled {
		// The caller's cancellation caused whatever failed.
		return ota.Wrap(ota.CodeCancelled, fmt.Errorf("write %s to %s: %w (%w)", job.URL, job.targetName(), ctx.Err(), err))
	}
	return err
}

type chunk struct {
	buf []byte
	off int64
	n   int
}

// pipeline runs three stages over a fixed set of buffers:
//
//	producer: fetch → decompress → sha256 → full
//	writer (the caller's goroutine): full → one pwritev of every chunk waiting (O_DIRECT) → free
//	readback: O_DIRECT reads of regions already synced → second sha256
//
// so the network, the CPU and the storage work at the same time.
type pipeline struct {
	job      *Job
	tun      *tuning
	out      sink
	expected []byte

	free     chan []byte
	full     chan chunk
	readBufs [][]byte

	written    atomic.Int64
	downloaded atomic.Int64
	durable    atomic.Int64 // bytes known to be on storage, for readback
	durableCh  chan struct{}
	readDone   atomic.Int64
	direct     atomic.Bool // readback used O_DIRECT

	lastReport time.Time
}

func (p *pipeline) run(parent context.Context) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	var failed atomic.Bool
	stop := func(err error) {
		failed.Store(true)
		cancel(err)
	}

	var wg sync.WaitGroup
	prodDone := make(chan struct{})
	var prodErr error
	wg.Go(func() {
		defer close(prodDone)
		defer close(p.full)
		if err := p.produce(ctx); err != nil {
			prodErr = err
			stop(err)
		}
	})
	rbDone := make(chan struct{})
	if p.job.Readback {
		wg.Go(func() {
			defer close(rbDone)
			if err := p.readback(ctx); err != nil {
				stop(err)
			}
		})
	} else {
		close(rbDone)
	}

	p.report(ota.Downloading, 0, true)
	s := p.out.flusher(p.tun.syncLag, p.publishDurable)
	werr := p.writeLoop(ctx, s)
	if werr != nil {
		stop(werr)
	}
	<-prodDone
	if werr == nil && prodErr == nil && !failed.Load() {
		if err := s.finish(p.job.Size); err != nil {
			stop(err)
		} else {
			p.report(ota.Downloading, p.job.Size, true)
		}
	}
	if p.job.Readback {
		tick := time.NewTicker(p.tun.progressEvery)
	wait:
		for {
			select {
			case <-rbDone:
				break wait
			case <-tick.C:
				if !failed.Load() {
					p.report(ota.Verifying, p.readDone.Load(), false)
				}
			}
		}
		tick.Stop()
		if !failed.Load() {
			p.report(ota.Verifying, p.readDone.Load(), true)
		}
	}
	wg.Wait()
	if failed.Load() {
		return p.classify(context.Cause(ctx))
	}
	return nil
}

func (p *pipeline) classify(err error) error {
	var e *ota.Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ota.Wrap(ota.CodeCancelled, fmt.Errorf("write %s to %s: %w", p.job.URL, p.job.targetName(), err))
	}
	return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("write %s to %s: %w", p.job.URL, p.job.targetName(), err))
}

func (p *pipeline) report(phase ota.Phase, done int64, force bool) {
	if p.job.Progress == nil {
		return
	}
	now := time.Now()
	if !force && now.Sub(p.lastReport) < p.tun.progressEvery {
		return
	}
	p.lastReport = now
	p.job.Progress(ota.Progress{Phase: phase, BytesDone: done, BytesTotal: p.job.Size, Transfer: ota.Transfer{Path: ota.PathStream, BytesFetched: p.downloaded.Load()}})
}

func (p *pipeline) publishDurable(off int64) {
	p.durable.Store(off)
	select {
	case p.durableCh <- struct{}{}:
	default:
	}
}

// produce fetches and decompresses the payload into buffers, which a
// stage of their own hashes on their way to the writer: on two cores the
// network's copy and the decoder run beside SHA-256, instead of one
// goroutine doing all three while the writer waits on storage (issue 33).
func (p *pipeline) produce(ctx context.Context) error {
	src, err := fetch.Open(ctx, p.job.request(p.job.URL, p.job.downloadLimit(), p.tun, &p.downloaded))
	if err != nil {
		return err
	}
	defer src.Close()
	dec, closeDec, err := newDecoder(ctx, src, p.job.Compression, p.job.URL)
	if err != nil {
		return err
	}
	defer closeDec()
	decoded := make(chan chunk, p.tun.buffers)
	hashed := make(chan []byte, 1)
	go func() { hashed <- p.hash(ctx, decoded) }()
	err = p.decode(ctx, dec, decoded)
	close(decoded)
	sum := <-hashed
	if err != nil {
		return err
	}
	if sum == nil {
		return context.Cause(ctx)
	}
	if !bytes.Equal(sum, p.expected) {
		return ota.Wrap(ota.CodeHashMismatch, fmt.Errorf("payload %s written to %s has sha256 %x, manifest says %s", p.job.URL, p.job.targetName(), sum, strings.ToLower(p.job.SHA256)))
	}
	return nil
}

// decode fills free buffers with the payload's bytes, in order, and
// checks that it ends at the manifest's size.
func (p *pipeline) decode(ctx context.Context, dec io.Reader, out chan<- chunk) error {
	size := p.job.Size
	var off int64
	for off < size {
		var buf []byte
		select {
		case buf = <-p.free:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		n := int(min(int64(len(buf)), size-off))
		got, err := io.ReadFull(dec, buf[:n])
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return ota.Wrap(ota.CodeSizeMismatch, fmt.Errorf("payload %s ends after %d bytes, manifest size is %d", p.job.URL, off+int64(got), size))
			}
			return err
		}
		out <- chunk{buf: buf, off: off, n: n} // never blocks: one slot per buffer
		off += int64(n)
	}
	// One byte past the manifest size tells a longer payload from a complete one.
	var one [1]byte
	n, err := io.ReadFull(dec, one[:])
	if n > 0 {
		return ota.Wrap(ota.CodeSizeMismatch, fmt.Errorf("payload %s is longer than manifest size %d", p.job.URL, size))
	}
	if err != io.EOF {
		return err
	}
	return nil
}

// hash passes the decoded chunks to the writer, hashing each first, and
// returns the payload's SHA-256 once in is closed; nil when ctx ended first.
func (p *pipeline) hash(ctx context.Context, in <-chan chunk) []byte {
	h := sha256.New()
	for c := range in {
		h.Write(c.buf[:c.n])
		select {
		case p.full <- c:
		case <-ctx.Done():
			for range in {
			}
			return nil
		}
	}
	return h.Sum(nil)
}

// writeLoop writes full buffers to the target in order and hands them back.
// Every chunk already waiting goes into the same vectored write: with
// O_DIRECT a write returns only once the device has it, so the larger the
// write, the busier the device (a virtual disk took 512 KiB direct writes
// at 169 MB/s one by one, 300 MB/s in 4 MiB ones), and while the producer
// is ahead, writes grow to what the buffers hold (docs/design.md, "Writing
// a slot").
func (p *pipeline) writeLoop(ctx context.Context, s flusher) error {
	batch := make([]chunk, 0, p.tun.buffers)
	iov := make([][]byte, 0, p.tun.buffers)
	for {
		batch = batch[:0]
		select {
		case c, ok := <-p.full:
			if !ok {
				return nil
			}
			batch = append(batch, c)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	gather:
		for len(batch) < cap(batch) {
			select {
			case c, ok := <-p.full:
				if !ok {
					break gather // the next receive returns
				}
				batch = append(batch, c)
			default:
				break gather
			}
		}
		// Nothing more is written once the install is cancelled or failed.
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if p.tun.beforeWrite != nil {
			p.tun.beforeWrite(p, batch)
		}
		iov = iov[:0]
		for _, c := range batch {
			iov = append(iov, c.buf[:c.n])
		}
		last := batch[len(batch)-1]
		end := last.off + int64(last.n)
		if err := p.out.writev(iov, batch[0].off); err != nil {
			return ota.Wrap(ota.CodeWriteFailed, fmt.Errorf("write %d bytes at offset %d of %s: %w", end-batch[0].off, batch[0].off, p.job.targetName(), err))
		}
		for _, c := range batch {
			p.free <- c.buf
			end := c.off + int64(c.n)
			p.written.Store(end)
			if err := s.advance(end); err != nil {
				return err
			}
		}
		p.report(ota.Downloading, end, false)
	}
}
