package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/otad/otad/bootctl/sim"
	"github.com/otad/otad/internal/testkit/otadrun"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
	"github.com/otad/otad/sim/demo"
	"golang.org/x/sys/unix"
)

// The chunked rows (issue 10): a chunked install of the same image with
// nothing to reuse, the update that changes 1% of its chunks, and a chunked
// install killed (SIGKILL) at 50% of its download and started again. Each
// runs on a device whose booted slot B holds a committed image installed
// from a chunked payload, so that the kept index says what it holds (no
// scan of the booted slot); readback is off. The payloads are cut as otactl
// sign --chunked cuts by default: content-defined chunks (index version 2).
const (
	maxChunkedRSS  = 16 << 20
	changedEvery   = 100 // 1% of the chunks, scattered
	chunkedLevel   = 1   // random images store raw whatever the level
	otherImageSize = 1 << 20
)

// chunkedFiles is a chunked payload served by the bench's file server.
type chunkedFiles struct {
	name   string // NAME.idx and NAME.store in the work directory
	sum    string
	size   int64
	chunks *payload.Result
}

// buildChunked cuts the image at path into NAME.idx and NAME.store beside it.
func buildChunked(ctx context.Context, path, name string) (*chunkedFiles, error) {
	in, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("chunked payload: %w", err)
	}
	defer in.Close()
	dir := filepath.Dir(path)
	store, err := os.Create(filepath.Join(dir, name+".store"))
	if err != nil {
		return nil, fmt.Errorf("chunked payload: %w", err)
	}
	defer store.Close()
	bw := bufio.NewWriterSize(store, ioChunk)
	res, err := payload.Build(ctx, bufio.NewReaderSize(in, ioChunk), bw, payload.Options{Level: chunkedLevel, Chunking: ota.ChunkingCDC})
	if err != nil {
		return nil, fmt.Errorf("chunked payload %s: %w", name, err)
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("chunked payload %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".idx"), res.Index, 0o644); err != nil {
		return nil, fmt.Errorf("chunked payload %s: %w", name, err)
	}
	return &chunkedFiles{name: name, sum: hex.EncodeToString(res.ImageSHA256[:]), size: res.ImageSize, chunks: res}, store.Close()
}

// changeChunks writes a copy of src to dst with one byte changed in every
// changedEvery-th chunk of payload.DefaultChunkSize, from the 7th on.
func changeChunks(src, dst string, size int64) error {
	if err := copyFile(src, dst); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("changed image: %w", err)
	}
	defer f.Close()
	var b [1]byte
	for off := int64(7)*payload.DefaultChunkSize + 4321; off < size; off += changedEvery * payload.DefaultChunkSize {
		if _, err := f.ReadAt(b[:], off); err != nil {
			return fmt.Errorf("changed image: %w", err)
		}
		b[0] ^= 0xff
		if _, err := f.WriteAt(b[:], off); err != nil {
			return fmt.Errorf("changed image: %w", err)
		}
	}
	return f.Close()
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer out.Close()
	if _, err := io.CopyBuffer(out, onlyReader{in}, make([]byte, ioChunk)); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return out.Close()
}

// chunkedDevice is a test device that booted slot B after committing a
// chunked install there, with what its state directory and bootloader held
// then, to start every phase from.
type chunkedDevice struct {
	*testDevice
	otad  string
	saved map[string][]byte // state dir files (relative path) and the sim env
}

// newChunkedDevice lays out a device under dir, installs booted there from
// a chunked payload, boots it and commits it.
func newChunkedDevice(ctx context.Context, otad, dir, base, ca string, size int64, booted *chunkedFiles, rel *signer.Signer) (*chunkedDevice, error) {
	dev, err := newTestDevice(dir, base+"/image.bin", size, "", rel, ca)
	if err != nil {
		return nil, err
	}
	d := &chunkedDevice{testDevice: dev, otad: otad}
	env, err := d.offer(base, booted, 0)
	if err != nil {
		return nil, err
	}
	if _, err := installOtad(ctx, otad, dev.cfg[false], env); err != nil {
		return nil, fmt.Errorf("install %s on the chunked device: %w", booted.name, err)
	}
	if got, err := fileSHA(dev.slotB, booted.size); err != nil || got != booted.sum {
		return nil, fmt.Errorf("slot B %s does not hold the image afterwards: sha256 %s, want %s (%v)", dev.slotB, got, booted.sum, err)
	}
	s, err := sim.Open(dev.envFile, 3)
	if err != nil {
		return nil, err
	}
	if slot, err := s.Boot(); err != nil || slot != "B" {
		return nil, fmt.Errorf("the chunked device booted %q after installing %s (%v)", slot, booted.name, err)
	}
	if err := otadrun.MarkGood(ctx, otad, dev.cfg[false]); err != nil {
		return nil, err
	}
	return d, d.save()
}

// offer signs a chunked offer of f, issued later the later it comes.
func (d *chunkedDevice) offer(base string, f *chunkedFiles, n int) (string, error) {
	return d.sign(signer.Offer{ID: "chunked-" + f.name, Version: f.name, SecurityVersion: 1, Compatible: compatible,
		Size: f.size, SHA256: f.sum, Chunks: f.chunks.Chunks(base + "/" + f.name),
		Issued: time.Now().UTC().Add(time.Duration(n-10) * time.Minute)}, f.name)
}

// save keeps the state directory and the sim bootloader's state.
func (d *chunkedDevice) save() error {
	d.saved = map[string][]byte{}
	err := filepath.WalkDir(d.stateDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(d.stateDir, path)
		d.saved[rel] = b
		return err
	})
	if err != nil {
		return fmt.Errorf("save the chunked device: %w", err)
	}
	env, err := os.ReadFile(d.envFile)
	d.saved["\x00env"] = env
	return err
}

// restore puts the device back as save found it, with a fresh target slot A.
func (d *chunkedDevice) restore() error {
	if err := os.RemoveAll(d.stateDir); err != nil {
		return fmt.Errorf("restore the chunked device: %w", err)
	}
	for rel, b := range d.saved {
		path := filepath.Join(d.stateDir, rel)
		if rel == "\x00env" {
			path = d.envFile
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("restore the chunked device: %w", err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return fmt.Errorf("restore the chunked device: %w", err)
		}
	}
	return nil
}

// install runs a timed chunked install of env into slot A; with killAt > 0
// otad is killed (SIGKILL) once the server has sent that many bytes, and
// started again: the sample covers both runs.
func (d *chunkedDevice) install(ctx context.Context, bin string, how installHow, env string, sent *atomic.Int64, killAt int64, size int64, want string) (sample, error) {
	if err := d.restore(); err != nil {
		return sample{}, err
	}
	if err := allocateSlot(d.slotA, size); err != nil {
		return sample{}, err
	}
	unix.Sync()
	var s sample
	if killAt > 0 {
		at := sent.Load() + killAt
		k, err := runOtad(ctx, how.cpus, bin, d.cfg[how.readback], env, func() bool { return sent.Load() >= at })
		if err != nil {
			return sample{}, err
		}
		s = k
	}
	r, err := runOtad(ctx, how.cpus, bin, d.cfg[how.readback], env, nil)
	if err != nil {
		return sample{}, err
	}
	s.dur, s.cpu, s.user, s.sys = s.dur+r.dur, s.cpu+r.cpu, s.user+r.user, s.sys+r.sys
	s.rss, s.fromStorage = max(s.rss, r.rss), s.fromStorage+r.fromStorage
	got, err := fileSHA(d.slotA, size)
	if err != nil {
		return s, err
	}
	if got != want {
		return s, fmt.Errorf("slot A %s does not hold the image afterwards: sha256 %s, want %s", d.slotA, got, want)
	}
	return s, nil
}

// chunkedPhases builds the chunked payloads of the image, of a copy with 1%
// of its chunks changed, and of an unrelated small image, sets up the two
// chunked devices (one booted on the small image, one on the image itself)
// and returns the chunked rows. stream is the stream install's row (readback
// off), which the chunked install's throughput is held against.
func chunkedPhases(ctx context.Context, o options, work string, srv *demo.FileServer, base string, ideals map[idealKey]*phaseStats, rel *signer.Signer) ([]*phase, error) {
	image := filepath.Join(work, "image.bin")
	v1, err := buildChunked(ctx, image, "v1")
	if err != nil {
		return nil, err
	}
	changed := filepath.Join(work, "image2.bin")
	if err := changeChunks(image, changed, o.size); err != nil {
		return nil, err
	}
	v2, err := buildChunked(ctx, changed, "v2")
	if err != nil {
		return nil, err
	}
	otherPath := filepath.Join(work, "other.bin")
	if _, err := generateSeed(otherPath, otherImageSize, "other"); err != nil {
		return nil, err
	}
	other, err := buildChunked(ctx, otherPath, "other")
	if err != nil {
		return nil, err
	}
	// Short directory names: the control socket's path must fit sun_path.
	fresh, err := newChunkedDevice(ctx, o.otad, filepath.Join(work, "c1"), base, o.caFile, o.size, other, rel)
	if err != nil {
		return nil, err
	}
	updated, err := newChunkedDevice(ctx, o.otad, filepath.Join(work, "c2"), base, o.caFile, o.size, v1, rel)
	if err != nil {
		return nil, err
	}
	envV1, err := fresh.offer(base, v1, 1)
	if err != nil {
		return nil, err
	}
	envV2, err := updated.offer(base, v2, 1)
	if err != nil {
		return nil, err
	}
	row := func(bin, name string, how installHow, d *chunkedDevice, env string, killAt int64, want string) *phase {
		st := &phaseStats{name: name}
		if bin == o.otad {
			st.maxRSS = maxChunkedRSS
		}
		return &phase{stats: st, run: func(ctx context.Context, _ int) (sample, error) {
			return d.install(ctx, bin, how, env, srv.Sent, killAt, o.size, want)
		}}
	}
	// With -before, the older build's chunked installs (but the kill)
	// run in the same rounds, for a before/after comparison.
	bins := []struct{ label, bin string }{{"otad", o.otad}}
	if o.before != "" {
		bins = append(bins, struct{ label, bin string }{"before", o.before})
	}
	var rows []*phase
	for _, b := range bins {
		for _, h := range hows {
			r := row(b.bin, b.label+" chunked, nothing to reuse, "+h.String(), h, fresh, envV1, 0, v1.sum)
			r.stats.ref = ideals[idealKey{"raw", h}]
			if b.bin == o.otad {
				r.stats.minRatio = h.target()
			}
			rows = append(rows, r)
		}
		rows = append(rows, row(b.bin, b.label+" chunked, 1% changed", installHow{}, updated, envV2, 0, v2.sum))
	}
	return append(rows, row(o.otad, "otad chunked, kill at 50%+resume", installHow{}, fresh, envV1, v1.chunks.StoreSize/2, v1.sum)), nil
}
