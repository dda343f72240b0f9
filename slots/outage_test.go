package slots

import (
	"bytes"
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otad/otad/backoff"
	"github.com/otad/otad/internal/testkit/linktest"
	"github.com/otad/otad/ota"
)

// The outage tests' link: how long it is down, and the [download] backoff
// and max_backoff the device waits with (the real backoff, not a recorded
// one). `make test` keeps them short; by hand, e.g.
//
//	go test ./slots -run TestOutage -v -timeout 40m -outage 10m -outage-cap 1m -outage-stall 30s
var (
	outageFor   = flag.Duration("outage", 3*time.Second, "how long the link is down in the outage tests")
	outageCap   = flag.Duration("outage-cap", 400*time.Millisecond, "download.max_backoff in the outage tests")
	outageStall = flag.Duration("outage-stall", 300*time.Millisecond, "the stall timeout in the outage tests")
)

func outagePolicy() backoff.Policy {
	return backoff.Policy{Attempts: 3, Base: min(50*time.Millisecond, *outageCap), Max: *outageCap}
}

// waits records the progress reports that say the download waits.
type waits struct {
	mu   sync.Mutex
	seen []ota.Waiting
	last ota.Progress
}

func (w *waits) progress(p ota.Progress) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = p
	if p.Waiting != nil {
		w.seen = append(w.seen, *p.Waiting)
	}
}

// check asserts the download said it waited for the network, and no longer does.
func (w *waits) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) == 0 || w.seen[0].For != ota.WaitNetwork || w.seen[0].Error == "" || !w.seen[0].NextTry.After(w.seen[0].Since.Add(-time.Millisecond)) {
		t.Fatalf("no report said the download waits for the network: %+v", w.seen)
	}
	if w.last.Waiting != nil {
		t.Fatalf("the last report still waits: %+v", w.last)
	}
	t.Logf("%d wait reports; the first: %+v", len(w.seen), w.seen[0])
}

// cutAt takes the link down in mode once it carried at bytes, for
// *outageFor, then brings it up.
func cutAt(ctx context.Context, link *linktest.Link, at int64, mode linktest.Mode) {
	go func() {
		for link.Served() < at {
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
		link.Down(mode)
		select {
		case <-ctx.Done():
		case <-time.After(*outageFor):
		}
		link.Up()
	}()
}

// headerAllowance is what HTTP headers may add to the bytes a link carries:
// a few hundred bytes a response.
const headerAllowance = 16 << 10

// TestOutageStream: the link of a stream install goes down at 40%, refusing
// or blackholing connections, for longer than the attempts used to last
// (with make test's short backoff, 3 attempts ended it well within the
// outage; with the defaults, after about 140 s). The install waits, saying
// so, resumes with Range once the link is back, and writes the image with
// under 1% of the payload carried twice.
func TestOutageStream(t *testing.T) {
	img := testImage(4<<20, 31)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"img"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(img))
	}))
	defer srv.Close()
	for _, mode := range []struct {
		name string
		m    linktest.Mode
	}{{"refused", linktest.Refuse}, {"blackholed", linktest.Blackhole}} {
		t.Run(mode.name, func(t *testing.T) {
			link := linktest.New(t, strings.TrimPrefix(srv.URL, "http://"))
			link.SetRate(4 << 20)
			dir := t.TempDir()
			slot := makeSlot(t, dir, "b.img", len(img)+4096)
			w := &waits{}
			job := Job{Payload: ota.Payload{URL: "http://" + link.Addr + "/img", Size: int64(len(img)), SHA256: sha(img)},
				Target: File(slot), Retry: outagePolicy(), Until: time.Now().Add(*outageFor + time.Hour), Progress: w.progress}
			tun := testTuning()
			tun.stall = *outageStall
			cutAt(t.Context(), link, int64(len(img))*4/10, mode.m)
			start := time.Now()
			if err := write(t.Context(), job, tun); err != nil {
				t.Fatalf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
			}
			checkSlot(t, slot, img, len(img)+4096)
			w.check(t)
			twice := link.Served() - int64(len(img))
			t.Logf("outage %s: installed in %s; the link carried %d bytes for a %d-byte payload (%.3f%% more)",
				*outageFor, time.Since(start).Round(time.Millisecond), link.Served(), len(img), 100*float64(twice)/float64(len(img)))
			if twice > int64(len(img))/100+headerAllowance {
				t.Fatalf("%d bytes carried twice, more than 1%% of %d", twice, len(img))
			}
		})
	}
}

// TestOutageChunked: the same for a chunked install, whose lanes fetch
// ranges of the store: every lane waits and goes on from the first chunk it
// did not deliver.
func TestOutageChunked(t *testing.T) {
	for _, kind := range imageKinds() {
		t.Run(kind.name, func(t *testing.T) {
			img := kind.image(512, 37) // 8 MiB
			for _, mode := range []struct {
				name string
				m    linktest.Mode
			}{{"refused", linktest.Refuse}, {"blackholed", linktest.Blackhole}} {
				t.Run(mode.name, func(t *testing.T) {
					c := makeChunked(t, img)
					s := newStoreServer(t, c)
					d := newChunkSlots(t, len(img)+50000, testImage(len(img), 99))
					link := linktest.New(t, strings.TrimPrefix(s.URL, "http://"))
					link.SetRate(2 << 20)
					job := d.job(s, outagePolicy())
					job.Booted = nil // every chunk from the network
					job.URL, job.IndexURL = "http://"+link.Addr+"/img.store", "http://"+link.Addr+"/img.idx"
					job.Until = time.Now().Add(*outageFor + time.Hour)
					w := &waits{}
					job.Progress = w.progress
					tun := testTuning()
					tun.stall = *outageStall
					payloadBytes := int64(len(c.store) + len(c.idx))
					cutAt(t.Context(), link, payloadBytes*4/10, mode.m)
					start := time.Now()
					if err := writeChunked(t.Context(), job, tun, chunkTestTuning()); err != nil {
						t.Fatalf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
					}
					checkSlot(t, d.target, img, d.slotSize)
					w.check(t)
					twice := link.Served() - payloadBytes
					t.Logf("outage %s: installed in %s; the link carried %d bytes for a %d-byte payload (%.3f%% more), %d store requests",
						*outageFor, time.Since(start).Round(time.Millisecond), link.Served(), payloadBytes, 100*float64(twice)/float64(payloadBytes), s.asked.Load())
					if twice > payloadBytes/100+headerAllowance {
						t.Fatalf("%d bytes carried twice, more than 1%% of %d", twice, payloadBytes)
					}
				})
			}
		})
	}
}

// TestResignedResumes: a chunked install cut at 40% of its store, then an
// offer of the same image signed again (another offer, the same index and
// store): it resumes from the checkpoint the first left, and the store is
// fetched once in all, not once more.
func TestResignedResumes(t *testing.T) {
	img := chunkImage(1024, 41) // 16 MiB
	c, s, d, job := rig(t, img)
	job.Booted = nil
	ctx, cancel := context.WithCancel(t.Context())
	job.Progress = func(p ota.Progress) {
		if p.BytesDone >= int64(len(img))*4/10 {
			cancel()
		}
	}
	ct := chunkTestTuning()
	err := writeChunked(ctx, job, testTuning(), ct)
	wantCode(t, err, ota.CodeCancelled)
	first := s.served.Load()
	job.Offer, job.Progress = "re-signed", nil
	if err := writeChunked(t.Context(), job, testTuning(), ct); err != nil {
		t.Fatal(err)
	}
	checkSlot(t, d.target, img, d.slotSize)
	again := s.served.Load() - first
	t.Logf("cut at 40%% of the image, after %d of %d store bytes; the re-signed offer fetched %d (%.1f%%)", first, len(c.store), again, 100*float64(again)/float64(len(c.store)))
	if again >= int64(len(c.store))*65/100 {
		t.Fatalf("the re-signed offer fetched %d store bytes, not under 65%% of %d", again, len(c.store))
	}
}

// TestOutageVerdicts: what ends a download. A 404 is the server's verdict:
// download_failed at once, without waiting. A link that stays down is
// waited for only as long as the offer is valid: then download_failed,
// saying so.
func TestOutageVerdicts(t *testing.T) {
	img := testImage(256<<10, 43)
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	down := linktest.New(t, strings.TrimPrefix(srv.URL, "http://"))
	down.Down(linktest.Refuse)
	for _, tc := range []struct {
		name   string
		url    string
		until  time.Duration
		wantIn string
	}{
		{"404", srv.URL + "/img", time.Hour, "404"},
		{"the offer expires while the link is down", "http://" + down.Addr + "/img", 500 * time.Millisecond, "the offer expired at"},
	} {
		for _, chunked := range []bool{false, true} {
			name := tc.name + map[bool]string{false: ", stream", true: ", chunked"}[chunked]
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				slot := makeSlot(t, dir, "b.img", len(img))
				w := &waits{}
				job := Job{Payload: ota.Payload{URL: tc.url, Size: int64(len(img)), SHA256: sha(img)},
					Target: File(slot), Retry: outagePolicy(), Until: time.Now().Add(tc.until), Progress: w.progress}
				tun := testTuning()
				tun.stall = *outageStall
				var err error
				if chunked {
					c := makeChunked(t, img)
					err = writeChunked(t.Context(), ChunkedJob{Job: job, IndexURL: tc.url + ".idx", Expect: c.want, StateDir: dir}, tun, chunkTestTuning())
				} else {
					err = write(t.Context(), job, tun)
				}
				wantCode(t, err, ota.CodeDownloadFailed)
				if !strings.Contains(err.Error(), tc.wantIn) {
					t.Fatalf("%v, want it to say %q", err, tc.wantIn)
				}
				w.mu.Lock()
				waited := len(w.seen) > 0
				w.mu.Unlock()
				if waited != (tc.until < time.Hour) {
					t.Fatalf("%v: waited for the network: %v", err, waited)
				}
			})
		}
	}
}
