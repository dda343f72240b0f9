package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/otad/otad/internal/testkit/otadrun"
)

// The targets.
const (
	maxDeltaVsXdelta3 = 1.5      // otad with deltas / xdelta3 -9, ext4
	maxDeltaVsCasync  = 1.0      // otad with deltas / casync, every pair
	minChunkedRatio   = 0.9      // chunked install, nothing to reuse: throughput over the stream install's
	maxRSS            = 16 << 20 // every otad install
)

// installRow is one kind of otad install of a pair, measured each round.
type installRow struct {
	name string
	// unavailable says why the row was not run ("" when it was).
	unavailable string
	// minRatio is the least throughput against the stream install's; 0: none.
	minRatio float64
	samples  []otadrun.Sample
	sent     []int64  // what the server sent, each round
	said     transfer // what otad reported (the last round)
	dev      *device
	env      string
}

// pairResult is everything measured of one image pair.
type pairResult struct {
	p                imagePair
	oldSize, newSize int64
	installs         []*installRow // the stream install first
	stream, chunked  *installRow   // chunked: the update from the old image
	delta            *installRow
	xdelta3, zstd    peer
	casync           casyncFetch
	casyncIndex      int64
	casyncSent       int64 // a real `casync extract --seed` over HTTP
	casyncTook       time.Duration
}

func measurePairs(ctx context.Context, o options, r runner, pairs []imagePair, out io.Writer) error {
	run := filepath.Join(o.cache, "run")
	if err := os.RemoveAll(run); err != nil {
		return err
	}
	srvDir := filepath.Join(run, "srv")
	if err := os.MkdirAll(srvDir, 0o755); err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(run)
	}
	srv, err := startServer(srvDir)
	if err != nil {
		return err
	}
	defer srv.close()
	ctl, err := newOtactl(ctx, o.otactl, run, srvDir, srv.url, r)
	if err != nil {
		return err
	}
	if !ctl.delta {
		fmt.Fprintf(out, "%s sign has no --delta-from: the delta row is not available in this build\n", o.otactl)
	}
	var results []*pairResult
	for _, p := range pairs {
		res, err := measurePair(ctx, o, r, ctl, srv, run, p, out)
		if err != nil {
			return fmt.Errorf("%s pair: %w", p.name, err)
		}
		results = append(results, res)
	}
	fmt.Fprintln(out)
	for _, res := range results {
		printBytes(out, res)
		printInstalls(out, res, o.rounds)
	}
	return nil
}

func measurePair(ctx context.Context, o options, r runner, ctl *otactl, srv *countingServer, run string, p imagePair, out io.Writer) (*pairResult, error) {
	res := &pairResult{p: p}
	oldSHA, oldSize, err := fileSHA256(p.old)
	if err != nil {
		return nil, err
	}
	newSHA, newSize, err := fileSHA256(p.new)
	if err != nil {
		return nil, err
	}
	res.oldSize, res.newSize = oldSize, newSize
	fmt.Fprintf(out, "\n%s: old %s (%.1f MB, sha256 %.12s…), new %s (%.1f MB, sha256 %.12s…), slots of %s\n",
		p.name, p.old, mb(oldSize), oldSHA, p.new, mb(newSize), newSHA, sizeName(p.slotSize))

	// Offers issued in order: the old image's first, as it was released first.
	t0 := time.Now().Add(-time.Hour)
	start := time.Now()
	envOld, err := ctl.sign(ctx, p.name+"-old", p.old, "old", t0, "--chunked")
	if err != nil {
		return nil, err
	}
	envFull, err := ctl.sign(ctx, p.name+"-full.zst", p.new, "new", t0.Add(time.Minute), "--compress", "zstd")
	if err != nil {
		return nil, err
	}
	envChunked, err := ctl.sign(ctx, p.name+"-chunked", p.new, "new", t0.Add(time.Minute), "--chunked")
	if err != nil {
		return nil, err
	}
	envDelta := ""
	if ctl.delta {
		if envDelta, err = ctl.sign(ctx, p.name+"-delta", p.new, "new", t0.Add(time.Minute), "--chunked", "--delta-from", p.old); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(out, "  signed the payloads in %v\n", time.Since(start).Round(time.Millisecond))

	// Short directory names: the control socket's path must fit sun_path.
	updated, err := newDevice(o.otad, filepath.Join(run, p.name+"-u"), p.slotSize, ctl.pub, o.readback)
	if err != nil {
		return nil, err
	}
	if err := updated.boot(ctx, envOld); err != nil {
		return nil, fmt.Errorf("installing the old image: %w", err)
	}
	blank, err := newDevice(o.otad, filepath.Join(run, p.name+"-b"), p.slotSize, ctl.pub, o.readback)
	if err != nil {
		return nil, err
	}
	res.stream = &installRow{name: "otad full (stream zstd)", dev: updated, env: envFull}
	fresh := &installRow{name: "otad chunked, nothing to reuse", dev: blank, env: envChunked, minRatio: minChunkedRatio}
	res.chunked = &installRow{name: "otad chunked, from old", dev: updated, env: envChunked}
	res.delta = &installRow{name: "otad with deltas, from old", dev: updated, env: envDelta}
	if !ctl.delta {
		res.delta.unavailable = "not available in this build (otactl sign has no --delta-from)"
	}
	res.installs = []*installRow{res.stream, fresh, res.chunked, res.delta}
	for round := range o.rounds {
		// Rotate the order, so no install always follows the same one.
		for k := range res.installs {
			row := res.installs[(k+round)%len(res.installs)]
			if row.unavailable != "" {
				continue
			}
			before := srv.sent.Load()
			s, t, err := row.dev.install(ctx, row.env, newSHA, newSize)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round+1, row.name, err)
			}
			row.samples, row.sent, row.said = append(row.samples, s), append(row.sent, srv.sent.Load()-before), t
		}
		fmt.Fprintf(out, "  round %d:%s\n", round+1, roundLine(res.installs, round, newSize))
	}

	peerDir := filepath.Join(run, "peers")
	if err := os.MkdirAll(peerDir, 0o755); err != nil {
		return nil, err
	}
	if res.xdelta3, err = xdelta3Peer(ctx, r, peerDir, p, oldSize, newSHA); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  %s: %.2f MB in %v\n", res.xdelta3.name, mb(res.xdelta3.bytes), res.xdelta3.took.Round(time.Millisecond))
	if res.zstd, err = zstdPeer(ctx, r, peerDir, p, oldSize, o.zstdLevel, newSHA); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  %s: %.2f MB in %v\n", res.zstd.name, mb(res.zstd.bytes), res.zstd.took.Round(time.Millisecond))
	if err := casyncRows(ctx, r, res, srv, ctl.srvDir, peerDir, newSHA); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  casync: %d of %d chunks new, %.2f MB + index %.2f MB; extract --seed fetched %.2f MB in %v\n",
		res.casync.newChunks, res.casync.chunks, mb(res.casync.bytes), mb(res.casyncIndex), mb(res.casyncSent), res.casyncTook.Round(time.Millisecond))
	return res, nil
}

// casyncRows makes casync stores of both images (served, so that a real
// `casync extract --seed=OLD` can fetch from them), counts what NEW needs
// beyond OLD, and runs that extract against the counting server.
func casyncRows(ctx context.Context, r runner, res *pairResult, srv *countingServer, served, peerDir, newSHA string) error {
	dir := filepath.Join(served, "casync")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var err error
	if res.casync, res.casyncIndex, err = casyncPeer(ctx, r, dir, res.p); err != nil {
		return err
	}
	extracted := filepath.Join(peerDir, res.p.name+".casync-out")
	defer os.Remove(extracted)
	base := srv.url + "/casync/" + res.p.name + "-new"
	before := srv.sent.Load()
	res.casyncTook, err = r.output(ctx, time.Hour, nil, "casync", "extract", "--store="+base+".castr", "--seed="+res.p.old,
		"--seed-output=no", base+".caibx", extracted)
	if err != nil {
		return err
	}
	res.casyncSent = srv.sent.Load() - before
	got, _, err := fileSHA256(extracted)
	if err != nil {
		return err
	}
	if got != newSHA {
		return fmt.Errorf("casync extract --seed made sha256 %s, not the new image's %s", got, newSHA)
	}
	return nil
}
