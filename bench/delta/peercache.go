package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/otad/otad/durable"
)

// peerFigures are the other tools' figures for one pair. They depend on the
// two images and the peers' settings only, so a run keeps them in the cache
// and the next reuses them (xdelta3 and zstd take minutes on a 1 GiB image);
// -rebuild makes them again.
type peerFigures struct {
	Key     string `json:"key"`
	Xdelta3 peer   `json:"xdelta3"`
	Zstd    peer   `json:"zstd"`
	// Bsdiff has no bytes where bsdiff is not installed or does not fit in
	// memory (its Name says which).
	Bsdiff      peer        `json:"bsdiff"`
	Casync      casyncFetch `json:"casync"`
	CasyncIndex int64       `json:"casync_index"`
	// CasyncSent is what a real `casync extract --seed=OLD` fetched over HTTP.
	CasyncSent int64         `json:"casync_sent"`
	CasyncTook time.Duration `json:"casync_took"`
}

// peerKey names what the figures were made of.
func peerKey(oldSHA, newSHA string, zstdLevel int) string {
	return fmt.Sprintf("old %s new %s zstd -%d casync %s bsdiff", oldSHA, newSHA, zstdLevel, casyncChunkSize)
}

// measurePeers returns the cached figures for the pair when their key
// matches and the patches are still there (the device's decodes are timed
// from them), else runs xdelta3, zstd --patch-from, bsdiff and casync, and
// caches them; dir keeps the patches.
func measurePeers(ctx context.Context, o options, r runner, srv *countingServer, served, dir string, p imagePair, oldSHA, newSHA string, out io.Writer) (peerFigures, error) {
	key := peerKey(oldSHA, newSHA, o.zstdLevel)
	cached := filepath.Join(o.cache, "images", p.name+".peers.json")
	var f peerFigures
	if b, err := os.ReadFile(cached); err == nil && json.Unmarshal(b, &f) == nil && f.Key == key && patchesKept(dir, p, f) {
		fmt.Fprintf(out, "  xdelta3, zstd and casync: figures from %s (the same images; -rebuild makes them again)\n", cached)
		return f, nil
	}
	f = peerFigures{Key: key}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return f, err
	}
	oldSize := fileSize(p.old)
	var err error
	if f.Xdelta3, err = xdelta3Peer(ctx, r, dir, p, oldSize, newSHA); err != nil {
		return f, err
	}
	fmt.Fprintf(out, "  %s: %.2f MB in %v\n", f.Xdelta3.Name, mb(f.Xdelta3.Bytes), f.Xdelta3.Took.Round(time.Millisecond))
	if f.Zstd, err = zstdPeer(ctx, r, dir, p, oldSize, o.zstdLevel, newSHA); err != nil {
		return f, err
	}
	fmt.Fprintf(out, "  %s: %.2f MB in %v\n", f.Zstd.Name, mb(f.Zstd.Bytes), f.Zstd.Took.Round(time.Millisecond))
	if f.Bsdiff, err = bsdiffPeer(ctx, r, dir, p, newSHA); err != nil {
		return f, err
	}
	if f.Bsdiff.Bytes > 0 {
		fmt.Fprintf(out, "  %s: %.2f MB in %v\n", f.Bsdiff.Name, mb(f.Bsdiff.Bytes), f.Bsdiff.Took.Round(time.Millisecond))
	} else {
		fmt.Fprintf(out, "  %s\n", f.Bsdiff.Name)
	}
	if err := casyncFigures(ctx, r, &f, srv, served, dir, p, newSHA); err != nil {
		return f, err
	}
	fmt.Fprintf(out, "  casync: %d of %d chunks new, %.2f MB + index %.2f MB; extract --seed fetched %.2f MB in %v\n",
		f.Casync.NewChunks, f.Casync.Chunks, mb(f.Casync.Bytes), mb(f.CasyncIndex), mb(f.CasyncSent), f.CasyncTook.Round(time.Millisecond))
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return f, err
	}
	return f, durable.WriteFile(cached, append(b, '\n'), 0o644)
}

// patchesKept says whether the patches the device's decodes are timed from
// are in dir.
func patchesKept(dir string, p imagePair, f peerFigures) bool {
	names := []string{p.name + ".xdelta3"}
	if f.Bsdiff.Bytes > 0 {
		names = append(names, p.name+".bsdiff")
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			return false
		}
	}
	return true
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// casyncFigures makes casync stores of both images (served, so that a real
// `casync extract --seed=OLD` can fetch from them), counts what NEW needs
// beyond OLD, and runs that extract against the counting server.
func casyncFigures(ctx context.Context, r runner, f *peerFigures, srv *countingServer, served, dir string, p imagePair, newSHA string) error {
	stores := filepath.Join(served, "casync")
	if err := os.MkdirAll(stores, 0o755); err != nil {
		return err
	}
	var err error
	if f.Casync, f.CasyncIndex, err = casyncPeer(ctx, r, stores, p); err != nil {
		return err
	}
	extracted := filepath.Join(dir, p.name+".casync-out")
	defer os.Remove(extracted)
	base := srv.url + "/casync/" + p.name + "-new"
	before := srv.sent.Load()
	f.CasyncTook, err = r.output(ctx, time.Hour, nil, "casync", "extract", "--store="+base+".castr", "--seed="+p.old,
		"--seed-output=no", base+".caibx", extracted)
	if err != nil {
		return err
	}
	f.CasyncSent = srv.sent.Load() - before
	got, _, err := fileSHA256(extracted)
	if err != nil {
		return err
	}
	if got != newSHA {
		return fmt.Errorf("casync extract --seed made sha256 %s, not the new image's %s", got, newSHA)
	}
	return nil
}
