package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/ota"
)

// Issue 9 (4): a health check that hangs, with a grandchild holding its
// output pipe, must not keep the device in confirming: at the end of the
// commit window the whole process group dies and the check has failed.
func TestHungHealthCheckWithGrandchildRollsBack(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	tb := devicetest.New(t, devicetest.Options{Policy: "immediate", Window: "1s",
		Health: []string{"/bin/sh", "-c", "sleep 600 & echo $! > " + pidFile + "; echo checking; sleep 600"}})
	t.Cleanup(func() { // never leave the sleepers behind, even when the test fails
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	})
	sum := stageAndReboot(t, tb)
	in := tb.Start(nil)
	select {
	case err := <-in.Done(): // the check failed: rebooted into A
		devicetest.Must(t, err)
	case <-time.After(15 * time.Second):
		in.Stop()
		t.Fatalf("still %s 14 s after a 1 s commit window", in.D.Agent.Status().State)
	}
	j := tb.Journal()
	if j.LastResult == nil || j.LastResult.Result != ota.ResultFailed || j.LastResult.Code != ota.CodeHealthCheckFailed || j.LastResult.SHA256 != sum {
		t.Fatalf("result %+v", j.LastResult)
	}
	b, err := os.ReadFile(pidFile)
	devicetest.Must(t, err)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	for i := 0; syscall.Kill(pid, 0) == nil; i++ {
		if i > 100 {
			t.Fatalf("grandchild %d of the health check still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stageAndReboot installs a new image and lets the sim device reboot into it.
func stageAndReboot(t *testing.T, tb *devicetest.Testbed) (sum string) {
	t.Helper()
	env, sum := tb.Offer("v2", 2, devicetest.OfferOpts{})
	in := tb.Start(nil)
	o, err := in.D.Agent.Install(context.Background(), env)
	devicetest.Must(t, err)
	if o.Result != ota.ResultStaged {
		t.Fatalf("outcome %+v", o)
	}
	in.Wait(t) // rebooted into B
	return sum
}
