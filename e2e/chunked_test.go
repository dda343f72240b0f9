//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/payload"
	"github.com/otad/otad/verify"
)

// checkpointInterval is the chunked writer's: a checkpoint every 8 MiB of
// image or 2 s.
const checkpointInterval = 8 << 20

// scenarioChunkedPowerCut: a chunked update (docs/contract/chunked.md) whose download a power
// cut (QEMU killed) interrupts. After the restart otad resumes at its
// checkpoint, fetches the rest and commits; the server sends in all no more
// than the store, one checkpoint interval and the index once per run. The
// booted slot has no kept index (the factory image), so otad hashes it and
// fetches only the chunks it does not hold.
func scenarioChunkedPowerCut(t *testing.T, ctx context.Context, d *device) {
	r := d.powerOnA(ctx)
	img, _ := d.payload(ctx, "B-c", Healthy, d.cfg)
	res := chunk(t, ctx, img.Path)
	env, err := chunkedOffer(d.kit.signer, "rel-b-c", img, res.Chunks(strings.TrimSuffix(d.http.URL(filepath.Base(img.Path)), ".ext4")), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d.http.Throttle(512 << 10) // seconds for what the booted slot lacks: time to cut the power
	if err := d.fleet.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	// A third of what the booted slot lacks (its network chunks are spread
	// over the image: by image bytes the download ends early).
	p, err := waitFor(ctx, d.fleet, &d.fleet.progress, func(p ota.Progress) bool { return p.BytesFetched >= 2<<20 })
	if err != nil {
		t.Fatalf("no progress report with 2 MiB fetched: %v", err)
	}
	t.Logf("%6.1fs  power cut at %d/%d bytes (%d fetched, %d reused); the server sent %d of the %d-byte store",
		time.Since(r.Started).Seconds(), p.BytesDone, p.BytesTotal, p.BytesFetched, p.BytesReused, d.http.Sent(), res.StoreSize)
	r.Kill()
	d.wantEnv(d.grubenv(ctx), map[string]string{"ORDER": "A  ", "B_OK": "0", "A_OK": "1"})
	cut := d.http.Sent()
	d.http.Throttle(0)
	r = d.powerOn()
	d.expect(ctx, r, bootingSlot("A"))
	d.expect(ctx, r, otadRunning("A"))
	d.expect(ctx, r, `install interrupted \(restart 1\)`)
	d.expect(ctx, r, bootingSlot("B"))
	d.expectCommitted(ctx, r, "B-c", "rel-b-c", img)
	st := d.waitStatus(ctx, "committed", settled("B", ota.ResultSuccess))
	sent, need := d.http.Sent(), networkNeed(t, ctx, res, filepath.Join(d.dir, "slotA.ext4"))
	t.Logf("store %d bytes, index %d, what slot A lacks %d; the server sent %d before the cut, %d in all; the device reports %+v",
		res.StoreSize, len(res.Index), need, cut, sent, st.LastResult.Transfer)
	if limit := need + checkpointInterval + int64(len(res.Index)); sent > limit {
		t.Errorf("the server sent %d bytes in all, more than what slot A lacks, a checkpoint interval and the index again (%d)", sent, limit)
	}
	if again := sent - cut; again > need-cut/2 {
		t.Errorf("after the cut the server sent %d bytes of the %d needed, %d of which came before: the install did not resume", again, need, cut)
	}
	if st.LastResult.BytesReused == 0 || st.LastResult.BytesFetched == 0 {
		t.Errorf("the device reports %+v: nothing fetched or nothing reused", st.LastResult.Transfer)
	}
	r.Kill()
	d.wantEnv(d.grubenv(ctx), map[string]string{"ORDER": "B A", "B_OK": "1", "B_TRY": "0"})
}

// networkNeed is what a chunked install of res fetches on a device whose
// booted slot holds the image at booted: the index and the chunks it lacks.
func networkNeed(t *testing.T, ctx context.Context, res *payload.Result, booted string) int64 {
	t.Helper()
	f, err := os.Open(booted)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	have, err := payload.ScanChunks(ctx, f, res.ChunkSize, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	x, err := payload.ParseIndex(res.Index, res.Expect())
	if err != nil {
		t.Fatal(err)
	}
	plan, err := payload.MakePlan(x, payload.PlanInput{Booted: have})
	if err != nil {
		t.Fatal(err)
	}
	return plan.FetchBytes + int64(len(res.Index))
}

// chunk writes path's chunked payload beside it: NAME.idx and NAME.store
// for path NAME.ext4.
func chunk(t *testing.T, ctx context.Context, path string) *payload.Result {
	t.Helper()
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var store bytes.Buffer
	res, err := payload.Build(ctx, in, &store, payload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	name := path[:len(path)-len(filepath.Ext(path))]
	if err := os.WriteFile(name+".store", store.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name+".idx", res.Index, 0o644); err != nil {
		t.Fatal(err)
	}
	return res
}

// chunkedOffer signs a schema-2 manifest for img's chunked payload.
func chunkedOffer(s *Signer, id string, img Image, chunks *ota.Chunks, issued time.Time) ([]byte, error) {
	m := verify.Manifest{
		Schema: 2, ID: id, Version: id, SecurityVersion: 1,
		Compatible: []string{GuestCompatible}, Devices: []string{GuestDeviceID},
		IssuedAt: issued.UTC().Truncate(time.Second), ExpiresAt: issued.UTC().Add(24 * time.Hour).Truncate(time.Second),
		Payload: verify.Payload{Size: img.Size, SHA256: img.SHA256, Chunks: chunks},
	}
	return verify.SignOffer(&m, s.Key)
}
