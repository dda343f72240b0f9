package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/otad/otad/internal/testkit/otadrun"
)

// The targets.
const (
	maxDeltaVsXdelta3 = 1.5      // otad with deltas / xdelta3 -9, ext4
	maxDeltaVsCasync  = 1.0      // otad with deltas / casync, every pair
	minChunkedRatio   = 0.9      // chunked install, nothing to reuse: throughput over the stream install's
	maxRSS            = 16 << 20 // every otad install
	maxFreshVsStream  = 1.05     // chunked payload with nothing to reuse / the stream payload, bytes (issue 30)
	maxDeltaCPU       = 1.5      // CPU of the install with deltas / the stream install's, on one core (issue 30)
)

// installRow is one kind of otad install of a pair, measured each round.
type installRow struct {
	name string
	// unavailable says why the row was not run ("" when it was).
	unavailable string
	// failed is the error that ended the row's installs (the rest of the
	// bench goes on: the other rows still tell something); failedSent is
	// what the server sent for that install.
	failed     string
	failedSent int64
	// minRatio is the least throughput against the stream install's; 0: none.
	minRatio float64
	samples  []otadrun.Sample
	sent     []int64  // what the server sent, each round
	said     transfer // what otad reported (the last round)
	dev      *device
	env      string
}

// skipped says why the row has no figures: not available, or failed.
func (r *installRow) skipped() string {
	if r.failed != "" {
		return "FAILED: " + firstLine(r.failed)
	}
	return r.unavailable
}

// firstLine is an error's first line and, when it has more (otad's
// output), its last: where otad says what went wrong.
func firstLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) == 1 {
		return lines[0]
	}
	return lines[0] + " … " + strings.TrimSpace(lines[len(lines)-1])
}

// pairResult is everything measured of one image pair.
type pairResult struct {
	p                imagePair
	oldSize, newSize int64
	installs         []*installRow // every install timed, the stream install first
	stream, delta    *installRow
	// updates are the rows of the bytes table: the installs on the device
	// that holds the old image.
	updates []*installRow
	peers   peerFigures
	// fresh is the chunked install with nothing to reuse; decodes are the
	// peers' own decodes of their patches, on the installs' cores.
	fresh   *installRow
	decodes []decodeRun
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
	var misses, unmeasured []string
	for _, res := range results {
		misses = append(misses, printBytes(out, res)...)
		misses = append(misses, printInstalls(out, res, o.rounds)...)
		misses = append(misses, printCPU(out, res, o.cpus)...)
		if u := res.delta.unavailable; u != "" {
			unmeasured = append(unmeasured, res.p.name+": otad with deltas' targets: "+u)
		}
	}
	printResult(out, misses, unmeasured)
	return nil
}

// signRows signs the payloads of the pair and the rows that install them:
// the old image on updated (installed and booted there first), the new one
// as a stream, chunked and with deltas; chunked with nothing to reuse on
// blank. With --chunking, both fixed and content-defined chunks.
func (res *pairResult) signRows(ctx context.Context, ctl *otactl, updated, blank *device) error {
	p := res.p
	// Offers issued in order: the old image's first, as it was released first.
	t0 := time.Now().Add(-time.Hour)
	var err error // the first signing error: the rest are skipped
	sign := func(name, image, version string, at time.Time, extra ...string) string {
		if err != nil {
			return ""
		}
		var env string
		env, err = ctl.sign(ctx, p.name+"-"+name, image, version, at, extra...)
		return env
	}
	envOld := sign("old", p.old, "old", t0, "--chunked")
	if err != nil {
		return err
	}
	if err := updated.boot(ctx, envOld); err != nil {
		return fmt.Errorf("installing the old image: %w", err)
	}
	t1 := t0.Add(time.Minute)
	res.stream = &installRow{name: "otad full (stream zstd)", dev: updated, env: sign("full.zst", p.new, "new", t1, "--compress", "zstd")}
	chunked := &installRow{name: "otad chunked, from old", dev: updated}
	rows := []*installRow{res.stream, chunked}
	if ctl.chunking {
		chunked.name = "otad chunked (cdc), from old"
		chunked.env = sign("cdc", p.new, "new", t1, "--chunked", "--chunking", "cdc")
		rows = append(rows, &installRow{name: "otad chunked (fixed), from old", dev: updated,
			env: sign("fixed", p.new, "new", t1, "--chunked", "--chunking", "fixed")})
	} else {
		chunked.env = sign("chunked", p.new, "new", t1, "--chunked")
	}
	res.delta = &installRow{name: "otad with deltas, from old", dev: updated}
	if ctl.delta {
		res.delta.env = sign("delta", p.new, "new", t1, "--chunked", "--delta-from", p.old)
	} else {
		res.delta.unavailable = "not available in this build (otactl sign has no --delta-from)"
	}
	res.updates = append(rows, res.delta)
	res.fresh = &installRow{name: "otad chunked, nothing to reuse", dev: blank, env: chunked.env, minRatio: minChunkedRatio}
	res.installs = append([]*installRow{res.stream, res.fresh}, res.updates[1:]...)
	return err
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

	// Short directory names: the control socket's path must fit sun_path.
	updated, err := newDevice(o.otad, o.cpus, filepath.Join(run, p.name+"-u"), p.slotSize, ctl.pub, o.readback)
	if err != nil {
		return nil, err
	}
	blank, err := newDevice(o.otad, o.cpus, filepath.Join(run, p.name+"-b"), p.slotSize, ctl.pub, o.readback)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := res.signRows(ctx, ctl, updated, blank); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  signed the payloads and installed the old image in %v\n", time.Since(start).Round(time.Millisecond))
	for round := range o.rounds {
		// Rotate the order, so no install always follows the same one.
		for k := range res.installs {
			row := res.installs[(k+round)%len(res.installs)]
			if row.skipped() != "" {
				continue
			}
			before := srv.sent.Load()
			s, t, err := row.dev.install(ctx, row.env, newSHA, newSize)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err != nil {
				row.failed = fmt.Sprintf("round %d: %v", round+1, err)
				row.failedSent, row.said = srv.sent.Load()-before, t
				fmt.Fprintf(out, "  %s: FAILED in %s\n", row.name, row.failed)
				continue
			}
			row.samples, row.sent, row.said = append(row.samples, s), append(row.sent, srv.sent.Load()-before), t
		}
		fmt.Fprintf(out, "  round %d:%s\n", round+1, roundLine(res.installs, round, newSize))
	}

	// The patches are kept beside the images: the decodes are timed from them in every run.
	peers := filepath.Join(o.cache, "images", "peers")
	if res.peers, err = measurePeers(ctx, o, r, srv, ctl.srvDir, peers, p, oldSHA, newSHA, out); err != nil {
		return nil, err
	}
	if res.decodes, err = peerDecodes(ctx, o.cpus, peers, p, res.peers, newSHA); err != nil {
		return nil, err
	}
	return res, nil
}
