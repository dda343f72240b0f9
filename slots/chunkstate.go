package slots

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/otad/otad/durable"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
)

// chunkDirName is the chunked installs' subdirectory of the state directory.
const chunkDirName = "chunked"

const (
	checkpointName = "checkpoint.json"
	indexSuffix    = ".idx"
	stagedIndex    = "new.idx.part" // the index of the install under way (stageIndex)
	scanName       = "booted.scan"
)

// checkpoint is how far an install got: chunks before Next are on storage
// (the slot was synced before the file was replaced).
type checkpoint struct {
	Key     string `json:"key"`
	Offer   string `json:"offer"`
	Next    int    `json:"next_chunk"`
	Done    int64  `json:"bytes_done"`
	Fetched int64  `json:"bytes_fetched"`
	Reused  int64  `json:"bytes_reused"`
	Delta   int64  `json:"bytes_delta,omitempty"`
}

// chunkState is <state_dir>/chunked: the checkpoint of the install under
// way, the index of each image written (<sha256>.idx), and the chunk list of
// a booted slot without one (booted.scan), replaced on fs.
//
// All of them are aids: without a checkpoint a restart starts over, without
// a kept index or a chunk list the next update hashes the booted slot
// again. One that cannot be written (a full state_dir) is a warning, and the
// install goes on.
type chunkState struct {
	dir string
	fs  durable.FS
	log *slog.Logger
}

func (s chunkState) init() {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		s.warn("chunked state", err)
	}
}

func (s chunkState) warn(what string, err error) {
	if s.log == nil {
		return
	}
	s.log.Warn("chunked install: "+what+" not written; the install goes on without it", "dir", s.dir, "err", err)
}

func (s chunkState) path(name string) string { return filepath.Join(s.dir, name) }

// loadCheckpoint returns the checkpoint when it is this install's (key);
// otherwise, and when it is unreadable, nil: the install starts over, which
// is always safe.
func (s chunkState) loadCheckpoint(key string) *checkpoint {
	b, err := readSmall(s.path(checkpointName), 1<<20)
	if err != nil {
		return nil
	}
	var cp checkpoint
	if json.Unmarshal(b, &cp) != nil || cp.Key != key {
		return nil
	}
	return &cp
}

// saveCheckpoint replaces the checkpoint; one not written leaves the last
// (chunks before its Next are still on storage: none is written twice).
func (s chunkState) saveCheckpoint(cp *checkpoint) {
	b, err := json.Marshal(cp)
	if err == nil {
		err = durable.WriteFileOn(s.fs, s.path(checkpointName), b, 0o600)
	}
	if err != nil {
		s.warn("checkpoint", err)
	}
}

func (s chunkState) removeCheckpoint() {
	if err := durable.RemoveOn(s.fs, s.path(checkpointName)); err != nil {
		s.warn("checkpoint removal", err)
	}
}

// stageIndex writes the index of the install under way beside the kept ones,
// under a name no lookup reads, and lets go of its bytes in memory: keepIndex
// renames the file once the image is written. A 1 GiB image's index file is
// 0.8 MB that would otherwise stay in the heap for the whole install (issue 30
// item 4). Not written, the index keeps its bytes, and keepIndex writes them.
func (s chunkState) stageIndex(x *payload.Index) {
	if err := durable.WriteFileOn(s.fs, s.path(stagedIndex), x.Bytes(), 0o600); err != nil {
		s.warn("the staged index", err)
		return
	}
	x.ReleaseBytes()
}

// keepIndex keeps the index of the image just written, so that the next
// update knows what this slot holds once it is booted, and forgets every
// other but the booted image's: indexes of images no slot holds any more.
func (s chunkState) keepIndex(image string, x *payload.Index, booted string) {
	image, booted = strings.ToLower(image), strings.ToLower(booted)
	if err := s.writeKept(s.path(image+indexSuffix), x); err != nil {
		s.warn("the index of the image written", err)
	}
	entries, _ := os.ReadDir(s.dir)
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), indexSuffix)
		if ok && name != image && name != booted {
			_ = s.fsys().Remove(s.path(e.Name()))
		}
	}
}

// writeKept puts x's file at path: the staged file renamed, or its bytes
// written when it has them (nothing was staged).
func (s chunkState) writeKept(path string, x *payload.Index) error {
	if b := x.Bytes(); b != nil {
		return durable.WriteFileOn(s.fs, path, b, 0o600)
	}
	if err := s.fsys().Rename(s.path(stagedIndex), path); err != nil {
		return err
	}
	return s.fsys().SyncDir(s.dir)
}

func (s chunkState) fsys() durable.FS {
	if s.fs == nil {
		return durable.OS{}
	}
	return s.fs
}

// keptIndex returns the kept index of image cut as like cuts (its chunking and
// chunk size), or nil.
func (s chunkState) keptIndex(image string, like *payload.Index) *payload.Index {
	image = strings.ToLower(image)
	if _, ok := ota.ParseSHA256(image); !ok {
		return nil
	}
	b, err := readSmall(s.path(image+indexSuffix), payload.MaxIndexSize)
	if err != nil {
		return nil
	}
	x, err := payload.ParseKept(b)
	if err != nil || x.ChunkSize() != like.ChunkSize() || x.Chunking() != like.Chunking() {
		return nil
	}
	return x
}

// bootedChunks lists what the booted slot holds: from the kept index of its
// image, or by hashing the slot chunk by chunk once (a factory image, or an
// index of another chunk size), kept in booted.scan for the next restart. It
// also settles which image the slot holds (in.bootedImage): the journal's word,
// or, when that names no image a deltas entry is for, the image of the entry
// whose from_size first bytes of the slot hash to its from, hashed in the same
// read of the slot. When the journal names the image of a placed deltas entry,
// it scans nothing yet: the delta index says where to read (placedOrScan).
func (in *chunkInstall) bootedChunks(ctx context.Context) (*payload.Have, error) {
	job := in.job
	in.bootedImage = strings.ToLower(job.BootedImage)
	booted := job.bootedPath()
	if booted == "" {
		return nil, nil
	}
	f, err := os.Open(booted)
	if err != nil {
		// Nothing to reuse is slower, never wrong.
		return nil, nil
	}
	size, err := fileSize(f)
	if err != nil {
		f.Close()
		return nil, nil
	}
	in.booted, in.bootedSize = f, size
	if in.ct.wrapBooted != nil {
		in.booted = in.ct.wrapBooted(f)
	}
	if x := in.state.keptIndex(job.BootedImage, in.x); x != nil {
		return payload.BootedChunks(x), nil
	}
	if in.placed = in.placedEntry(); in.placed {
		return nil, nil
	}
	return in.scanBooted(ctx)
}

// scanBooted hashes the booted slot chunk by chunk, cut as the index cuts,
// once: booted.scan keeps the list for a restart.
func (in *chunkInstall) scanBooted(ctx context.Context) (*payload.Have, error) {
	booted, size := in.job.bootedPath(), in.bootedSize
	sizes := in.fromSizes(size)
	key := scanKey(booted, in.job.BootedImage, in.x, size)
	if h, sums := in.state.loadScan(key, sizes); h != nil {
		in.identify(sums)
		return h, nil
	}
	ps := payload.NewPrefixSums(io.NewSectionReader(in.booted, 0, size), sizes)
	h, err := payload.ScanFor(ctx, ps, in.x, size)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, nil
	}
	in.state.saveScan(key, h, ps.Sums())
	in.identify(ps.Sums())
	return h, nil
}

// fromSizes are the sizes of the older images of the deltas entries a booted
// slot of size bytes may hold, when the journal's word names none of them.
func (in *chunkInstall) fromSizes(size int64) []int64 {
	c := in.job.Chunks
	if c == nil || c.Deltas == nil || c.DeltaFrom(in.bootedImage) >= 0 {
		return nil
	}
	var out []int64
	for _, d := range *c.Deltas {
		if d.FromSize > 0 && d.FromSize <= size {
			out = append(out, d.FromSize)
		}
	}
	return out
}

// identify takes the image of the first deltas entry whose older image the
// booted slot's prefix of its size is, as the image the booted slot holds.
func (in *chunkInstall) identify(sums map[int64][sha256.Size]byte) {
	c := in.job.Chunks
	if c == nil || c.Deltas == nil || len(sums) == 0 || c.DeltaFrom(in.bootedImage) >= 0 {
		return
	}
	for _, d := range *c.Deltas {
		if sum, ok := sums[d.FromSize]; ok && hex.EncodeToString(sum[:]) == d.From {
			in.bootedImage = d.From
			in.log.Info("booted slot holds an older image a delta is for", "slot", in.job.bootedPath(), "image", d.From, "size", d.FromSize)
			return
		}
	}
}

func scanKey(booted, image string, x *payload.Index, size int64) [sha256.Size]byte {
	if x.Chunking() == ota.ChunkingCDC {
		p := payload.CDCFor(x.ChunkSize())
		return sha256.Sum256(fmt.Appendf(nil, "otad booted scan 3\x00%s\x00%s\x00%d/%d/%d/%x\x00%d", booted, image, p.Min, p.Avg, p.Max, p.Pol, size))
	}
	return sha256.Sum256(fmt.Appendf(nil, "otad booted scan 3\x00%s\x00%s\x00%d\x00%d", booted, image, x.ChunkSize(), size))
}

// The scan file: the key, the number of prefix sums (8 bytes), each prefix's
// size (8 bytes) and sha256, then the chunk list (payload.Have's bytes). A
// file without a sum of every size asked for is scanned again.
func (s chunkState) loadScan(key [sha256.Size]byte, sizes []int64) (*payload.Have, map[int64][sha256.Size]byte) {
	b, err := readSmall(s.path(scanName), 64<<20)
	if err != nil || len(b) < len(key)+8 || [sha256.Size]byte(b[:len(key)]) != key {
		return nil, nil
	}
	b = b[len(key):]
	n := binary.LittleEndian.Uint64(b)
	b = b[8:]
	if n > uint64(len(b))/(8+sha256.Size) {
		return nil, nil
	}
	sums := make(map[int64][sha256.Size]byte, n)
	for range n {
		sums[int64(binary.LittleEndian.Uint64(b))] = [sha256.Size]byte(b[8 : 8+sha256.Size])
		b = b[8+sha256.Size:]
	}
	for _, size := range sizes {
		if _, ok := sums[size]; !ok {
			return nil, nil
		}
	}
	h := &payload.Have{}
	if h.UnmarshalBinary(b) != nil {
		return nil, nil
	}
	return h, sums
}

func (s chunkState) saveScan(key [sha256.Size]byte, h *payload.Have, sums map[int64][sha256.Size]byte) {
	list, err := h.MarshalBinary()
	if err == nil {
		b := binary.LittleEndian.AppendUint64(key[:], uint64(len(sums)))
		for size, sum := range sums {
			b = binary.LittleEndian.AppendUint64(b, uint64(size))
			b = append(b, sum[:]...)
		}
		err = durable.WriteFileOn(s.fs, s.path(scanName), append(b, list...), 0o600)
	}
	if err != nil {
		s.warn("the booted slot's chunk list", err)
	}
}

// readSmall reads a small file (state, /proc/cmdline) that must not be larger
// than limit.
func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	// Read to the end into room for the file's size, not ReadAll's
	// doublings (a kept index is read just before an install's buffers
	// fill); /proc files say 0 whatever they hold (/proc/cmdline).
	buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(buf.Len()) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return buf.Bytes(), nil
}
