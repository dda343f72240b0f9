package controller

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/rollout"
)

// A holder is proven gone only on this host and boot, with its pid not
// running (or a zombie); anything else is waited out.
func TestHolderGone(t *testing.T) {
	here := thisProcess()
	if here.bootID == "" {
		t.Skip("no /proc/sys/kernel/random/boot_id")
	}
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer zombie.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", zombie.Process.Pid))
		if strings.Contains(string(st), ") Z") || time.Now().After(deadline) {
			break
		}
	}
	lease := func(host, boot string, pid int) *rollout.Lease {
		return &rollout.Lease{Holder: "h", Host: host, BootID: boot, PID: pid}
	}
	for _, c := range []struct {
		name string
		l    *rollout.Lease
		gone bool
	}{
		{"exited here", lease(here.host, here.bootID, exited.Process.Pid), true},
		{"a zombie here", lease(here.host, here.bootID, zombie.Process.Pid), true},
		{"running here", lease(here.host, here.bootID, os.Getppid()), false},
		{"itself", lease(here.host, here.bootID, here.pid), false},
		{"another boot", lease(here.host, "0000-other-boot", exited.Process.Pid), false},
		{"another host", lease(here.host+"-x", here.bootID, exited.Process.Pid), false},
		{"an older controller's lease (no host)", lease("", "", exited.Process.Pid), false},
	} {
		if why, gone := holderGone(c.l, here); gone != c.gone {
			t.Errorf("%s: gone %v (%s), want %v", c.name, gone, why, c.gone)
		}
	}
}
