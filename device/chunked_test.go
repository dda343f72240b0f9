package device

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/ota"
)

// checkpointInterval is the chunked writer's: a checkpoint every 8 MiB of
// image (or 2 s).
const checkpointInterval = 8 << 20

// killCost is what a kill costs beyond the checkpoint interval
// (docs/contract/chunked.md): the range requests in flight (at most 3 MiB)
// and what was staged (at most 512 KiB).
const killCost = 3<<20 + 512<<10

// TestChunkedInstallResumesAfterKill: the real otad, killed with SIGKILL at
// 10%, 50% and 90% of a chunked download, resumes each time it is started
// again and installs the image; the server sends in all no more than the
// store, one checkpoint interval per kill, and the index once per run.
func TestChunkedInstallResumesAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 150 MiB")
	}
	const size = 48 << 20
	tb := devicetest.New(t, devicetest.Options{Policy: "manual", SlotSize: size + 4096})
	env, sum := tb.Offer("big", 0, devicetest.OfferOpts{Chunked: true, Image: devicetest.RandBytes(7, size)})
	store, idx := tb.Size("big.store"), tb.Size("big.idx")
	file := writeEnv(t, env)
	checkpoint := filepath.Join(tb.Cfg.StateDir, "chunked", "checkpoint.json")
	for _, pct := range []int64{10, 50, 90} {
		at := store * pct / 100
		tb.HoldAt.Store(at)
		cmd := exec.Command(otadBin, "install", "-c", tb.Cfg.Path, file)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		devicetest.Must(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		deadline := time.Now().Add(60 * time.Second)
		for tb.Fetched.Load() < at {
			select {
			case err := <-exited:
				t.Fatalf("otad ended before %d%% of the store was sent: %v\n%s", pct, err, stderr.String())
			case <-time.After(5 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d%% of the store not sent within a minute: %d bytes", pct, tb.Fetched.Load())
			}
		}
		devicetest.Must(t, cmd.Process.Signal(syscall.SIGKILL))
		<-exited
		if j := tb.Journal(); j.Phase != ota.Downloading {
			t.Fatalf("journal after the kill at %d%%: %s", pct, j.Phase)
		}
		if _, err := os.Stat(checkpoint); err != nil {
			t.Fatalf("no checkpoint after the kill at %d%%: %v", pct, err)
		}
		t.Logf("killed at %d%%: %d bytes sent so far", pct, tb.Fetched.Load())
	}
	tb.HoldAt.Store(0)
	before := tb.Fetched.Load()
	// What the last run starts from: the checkpoint's count of bytes fetched
	// before it (docs/contract/formats.md: bytes_fetched counts those too).
	var ckpt struct {
		Fetched int64 `json:"bytes_fetched"`
	}
	if b, err := os.ReadFile(checkpoint); err != nil || json.Unmarshal(b, &ckpt) != nil {
		t.Fatalf("checkpoint before the last run: %v %s", err, b)
	}
	if ckpt.Fetched > before {
		t.Fatalf("the checkpoint says %d bytes fetched; the server sent %d", ckpt.Fetched, before)
	}
	code, stdout, stderr := otad(t, "install", "-c", tb.Cfg.Path, file)
	if code != 0 || !strings.Contains(stdout, "staged rel-big") {
		t.Fatalf("last run: exit %d, %s %s", code, stdout, stderr)
	}
	if got := devicetest.FileSHA(t, tb.Cfg.Slots.B, size); got != sum {
		t.Fatalf("slot B holds %s, want %s", got, sum)
	}
	total, last := tb.Fetched.Load(), tb.Fetched.Load()-before
	t.Logf("store %d bytes, index %d; sent %d in all, %d in the last run", store, idx, total, last)
	if limit := store + 3*(checkpointInterval+killCost) + 4*idx; total > limit {
		t.Fatalf("sent %d bytes in all, more than the store, a checkpoint interval and what a kill costs per kill, and the index per run (%d)", total, limit)
	}
	if limit := store/10 + checkpointInterval + killCost + idx; last > limit {
		t.Fatalf("the last run fetched %d bytes, more than the last 10%%, an interval and what a kill costs (%d): it did not resume", last, limit)
	}
	if _, err := os.Stat(checkpoint); !os.IsNotExist(err) {
		t.Fatalf("checkpoint left after the install: %v", err)
	}
	// otad status tells what the install fetched (in the last run, and
	// before it as far as its checkpoint says) and reused (what a restart
	// found written in the target): between them, the whole of this random
	// image.
	code, stdout, _ = otad(t, "status", "--json", "-c", tb.Cfg.Path)
	var st ota.Status
	if code != 0 || json.Unmarshal([]byte(stdout), &st) != nil || st.Target == nil {
		t.Fatalf("status --json: exit %d %s", code, stdout)
	}
	// At most what the last run was sent plus what its checkpoint carried
	// from before. (The server's count of the last run may include bytes it
	// still sent to a killed run's connections, so this is an upper bound.)
	if tr := st.Target.Transfer; tr.BytesFetched == 0 || tr.BytesFetched > last+ckpt.Fetched || tr.BytesReused == 0 || tr.BytesFetched+tr.BytesReused < size {
		t.Fatalf("status target %+v: want at most the last run's bytes fetched and the %d its checkpoint carried, something reused, the image in all", st.Target, ckpt.Fetched)
	}
	if code, stdout, _ := otad(t, "status", "-c", tb.Cfg.Path); code != 0 || !strings.Contains(stdout, "fetched") {
		t.Fatalf("status: exit %d %s", code, stdout)
	}
}
