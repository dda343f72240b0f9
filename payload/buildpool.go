package payload

import (
	"crypto/sha256"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// The chunks of a version 2 store are hashed and compressed by a pool of workers, each
// with its own encoder, and written in image order by Build's goroutine. A zstd-prefix
// frame costs the best level's encoder most of its time in setting up its dictionary
// (prefix.go): one encoder alone would sign several times slower than a zstd store.
// Each chunk is encoded alone, so the store is the same whatever the number of workers.

// maxWorkers bounds the pool: each worker's encoder holds tens of MiB of tables at
// the best level.
const maxWorkers = 4

// chunkJob is one piece of the image in flight: a zero run, or a chunk with the
// image's bytes before it (with zstd-prefix) in one buffer.
type chunkJob struct {
	buf  []byte  // the prefix, then the chunk; empty for a zero run
	at   int     // where the chunk starts in buf
	rec  record2 // its index record, once done
	out  []byte  // the chunk as stored, when compressed
	err  error
	done chan struct{}
}

func (j *chunkJob) chunk() []byte { return j.buf[j.at:] }

// stored is what the store holds of the job's chunk.
func (j *chunkJob) stored() []byte {
	switch j.rec.kind {
	case KindZstd:
		return j.out
	case KindRaw:
		return j.chunk()
	}
	return nil
}

// chunkPool runs the jobs: pending, in image order, at most cap(free) of them.
type chunkPool struct {
	jobs     chan *chunkJob
	free     chan *chunkJob
	pending  []*chunkJob
	prefixed bool // zstd-prefix: each job holds its chunk's dictionary
	wg       sync.WaitGroup
}

// newChunkPool starts n workers (0: one per CPU, up to maxWorkers), with an encoder
// each made by enc (nil: chunks stored raw), for chunks of up to maxChunk bytes and,
// with zstd-prefix, prefixes of up to prefix bytes (0: none).
func newChunkPool(n int, enc func() (*zstd.Encoder, error), prefix, maxChunk int64) (*chunkPool, error) {
	if n <= 0 {
		n = min(runtime.GOMAXPROCS(0), maxWorkers)
	}
	p := &chunkPool{jobs: make(chan *chunkJob, 2*n), free: make(chan *chunkJob, 2*n), prefixed: prefix > 0}
	size := maxChunk + prefix
	for range 2 * n {
		p.free <- &chunkJob{buf: make([]byte, 0, size), done: make(chan struct{}, 1)}
	}
	for range n {
		var e *zstd.Encoder
		if enc != nil {
			var err error
			if e, err = enc(); err != nil {
				p.close()
				return nil, err
			}
		}
		p.wg.Add(1)
		go p.work(e)
	}
	return p, nil
}

// close stops the workers once the jobs sent are done.
func (p *chunkPool) close() {
	close(p.jobs)
	p.wg.Wait()
}

func (p *chunkPool) work(enc *zstd.Encoder) {
	defer p.wg.Done()
	if enc != nil {
		defer enc.Close()
	}
	for j := range p.jobs {
		j.encode(enc, p.prefixed)
		j.done <- struct{}{}
	}
}

// add queues k, a piece of the image, with prefix the image's bytes before it; when
// the pool is full it first hands the oldest job to finish, in image order.
func (p *chunkPool) add(k cut, prefix []byte, finish func(*chunkJob) error) error {
	if len(p.pending) == cap(p.free) {
		if err := p.next(finish); err != nil {
			return err
		}
	}
	j := <-p.free
	j.buf, j.at, j.err, j.rec = j.buf[:0], 0, nil, record2{length: uint64(k.n)}
	p.pending = append(p.pending, j)
	if k.data == nil {
		j.rec.kind = KindZero
		j.done <- struct{}{}
		return nil
	}
	if p.prefixed {
		j.buf = append(j.buf, prefix...)
		j.at = len(prefix)
	}
	j.buf = append(j.buf, k.data...)
	p.jobs <- j
	return nil
}

// next waits for the oldest job and finishes it.
func (p *chunkPool) next(finish func(*chunkJob) error) error {
	j := p.pending[0]
	<-j.done
	p.pending = p.pending[1:]
	err := j.err
	if err == nil {
		err = finish(j)
	}
	p.free <- j
	return err
}

// drain finishes every job pending, in order.
func (p *chunkPool) drain(finish func(*chunkJob) error) error {
	for len(p.pending) > 0 {
		if err := p.next(finish); err != nil {
			return err
		}
	}
	return nil
}

// encode hashes the job's chunk and compresses it with enc: zeros are not stored, a
// chunk stored zstd-compressed when that is smaller, raw when not.
func (j *chunkJob) encode(enc *zstd.Encoder, prefixed bool) {
	c := j.chunk()
	if AllZero(c) {
		j.rec.kind = KindZero
		return
	}
	j.rec.sum, j.rec.kind, j.rec.stored = sha256.Sum256(c), KindRaw, uint32(len(c))
	if enc == nil {
		return
	}
	var err error
	if prefixed {
		j.out, err = encodePrefixed(enc, j.buf[:j.at], c, j.out[:0])
	} else {
		j.out = enc.EncodeAll(c, j.out[:0])
	}
	switch {
	case err != nil:
		j.err = err
	case len(j.out) < len(c):
		j.rec.kind, j.rec.stored = KindZstd, uint32(len(j.out))
	}
}
