package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/testtool"
)

func TestParseQEMUVersion(t *testing.T) {
	tests := []struct {
		out     string
		want    [3]int
		old     bool // older than MinUBootQEMU
		wantErr bool
	}{
		{"QEMU emulator version 7.2.15 (Debian 1:7.2+dfsg-7+deb12u18+b3)\nCopyright", [3]int{7, 2, 15}, true, false},
		{"QEMU emulator version 9.0.0\n", [3]int{9, 0, 0}, true, false},
		{"QEMU emulator version 9.0.1\n", [3]int{9, 0, 1}, false, false},
		{"QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)\n", [3]int{10, 0, 2}, false, false},
		{"qemu-system-aarch64: not a version\n", [3]int{}, false, true},
	}
	for _, tc := range tests {
		got, err := parseQEMUVersion([]byte(tc.out))
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseQEMUVersion(%q) = %v, %v; want %v (error %v)", tc.out, got, err, tc.want, tc.wantErr)
			continue
		}
		if !tc.wantErr && versionLess(got, MinUBootQEMU) != tc.old {
			t.Errorf("%v older than %v = %v, want %v", got, MinUBootQEMU, !tc.old, tc.old)
		}
	}
}

func FuzzParseQEMUVersion(f *testing.F) {
	f.Add([]byte("QEMU emulator version 10.0.2 (Debian)"))
	f.Add([]byte("QEMU emulator version 99999999999999999999.1.1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseQEMUVersion(b)
		if err == nil && (v[0] < 0 || v[1] < 0 || v[2] < 0) {
			t.Fatalf("negative version %v from %q", v, b)
		}
	})
}

func TestUBootMachineArgs(t *testing.T) {
	m := UBootMachine{Flash0: "f0.img", Flash1: "f1.img", Disk: "disk.img"}
	args := strings.Join(m.Args(), " ")
	for _, want := range []string{
		"-M virt -cpu cortex-a57", "-no-reboot",
		"if=pflash,format=raw,index=0,readonly=on,file=f0.img",
		"if=pflash,format=raw,index=1,file.locking=off,file=f1.img",
		// The same flash as the guest's second virtio disk (/dev/vdb).
		"if=none,id=env,format=raw,file.locking=off,file=f1.img -device virtio-blk-pci,drive=env,id=envdisk",
		"-device i6300esb", "watchdog=reset",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args lack %q:\n%s", want, args)
		}
	}
	if strings.Contains(args, "-qmp") {
		t.Errorf("a QMP socket without QMP set: %s", args)
	}
	m.QMP = "/tmp/x.qmp"
	if args := m.Args(); !slices.Contains(args, "unix:/tmp/x.qmp,server=on,wait=off") {
		t.Errorf("QMP socket missing: %v", args)
	}
	if err := (UBootMachine{}).ThrottleEnvWrites(context.Background(), 1); err == nil {
		t.Error("throttling without a QMP socket: no error")
	}
}

// TestProvisionUBootEnv runs the real U-Boot once on a blank flash (about a
// second under TCG) and reads what its saveenv stored with fw_printenv.
func TestProvisionUBootEnv(t *testing.T) {
	testtool.Require(t, "qemu-system-aarch64", "qemu-system-arm")
	testtool.Require(t, "fw_printenv", "libubootenv-tool")
	if _, err := os.Stat(UBootBinary); err != nil {
		testtool.Require(t, "no-u-boot-qemu", "u-boot-qemu")
	}
	if v, err := qemuVersion("qemu-system-aarch64"); err != nil || versionLess(v, MinUBootQEMU) {
		t.Skipf("qemu-system-aarch64 %v (%v): saveenv needs %v", v, err, MinUBootQEMU)
	}
	dir := t.TempDir()
	f0, f1 := filepath.Join(dir, "flash0.img"), filepath.Join(dir, "flash1.img")
	if err := BuildFlash0(f0); err != nil {
		t.Fatal(err)
	}
	if err := BlankFlash(f1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ReadUBootEnv(ctx, f1, dir); !errors.Is(err, ErrNoEnv) {
		t.Fatalf("blank flash: fw_printenv gives %v, want ErrNoEnv", err)
	}
	log := filepath.Join(dir, "provision.log")
	vars := map[string]string{"bootdelay": "0", "otad_bootargs": "panic=-1 quiet"}
	if err := ProvisionUBootEnv(ctx, f0, f1, log, vars); err != nil {
		out, _ := os.ReadFile(log)
		t.Fatalf("%v\n%s", err, out)
	}
	env, err := ReadUBootEnv(ctx, f1, dir)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range vars {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	if env["bootcmd"] != "run distro_bootcmd" || env["p"] != "" {
		t.Errorf("saved env: bootcmd %q (want U-Boot's default), p %q (want the probe variable gone)", env["bootcmd"], env["p"])
	}
}
