//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/bootctl/uboot"
	"github.com/otad/otad/ota"
)

// Budgets of TestSystemd under TCG: a systemd guest reached multi-user in
// about 15 s on a direct boot, 25 s through OVMF and GRUB (docs/e2e.md).
const (
	systemdBudget  = 20 * time.Minute // the whole test, a first debootstrap included
	systemdPhase   = 4 * time.Minute  // power on to the driver's report, an install included
	systemdSlotMiB = 192              // the root filesystem and otad: also the update payload
)

// TestSystemd is a board's first day under a real systemd, with the shipped
// .deb and the shipped unit, changed only by the drop-in otad config check
// --unit-dropin writes (docs/operating.md#7-systemd):
//
//  1. A PC (OVMF, GRUB, the ESP at /boot/efi) boots its factory image on
//     slot A: dpkg -i, the config, otad config check, the drop-in, systemctl
//     enable --now otad: the unit reaches READY (Type=notify). An update
//     offered over MQTT installs into slot B and otad reboots through
//     systemd (systemctl reboot from inside the sandbox).
//  2. Slot B (otad installed by the image) starts otad, which commits after
//     the shipped health check; an untrusted offer is refused (a warning),
//     the trust directory is taken away (an error), the watchdog is fed; the
//     journal, read by priority, holds exactly the warnings and errors.
//  3. A U-Boot style board (no ESP, no /boot/efi, the environment on a
//     device of its own) goes through the first day too: the unit starts,
//     and otad's mark good reaches the environment through the sandbox.
func TestSystemd(t *testing.T) {
	requireAll(t, append(Missing(), MissingSystemd()...))
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), systemdBudget)
	defer cancel()
	s := newSystemdSuite(t, ctx)
	t.Logf("%s: the root, the package (%s) and the initramfs ready", time.Since(start).Round(time.Second), s.deb.Version)
	for _, sc := range []struct {
		name string
		run  func(*testing.T, context.Context)
	}{{"1_pc", s.pc}, {"2_board", s.board}} {
		t.Run(sc.name, func(t *testing.T) {
			begin := time.Now()
			sc.run(t, ctx)
			t.Logf("wall time %s", time.Since(begin).Round(time.Second))
		})
	}
	t.Logf("TestSystemd wall time %s", time.Since(start).Round(time.Second))
}

// systemdSuite is what both machines share: the cached Debian root, the
// package, the kernel and the initramfs, the release key.
type systemdSuite struct {
	work   string
	root   string
	deb    Deb
	kernel Kernel
	initrd string
	signer *Signer
}

func newSystemdSuite(t *testing.T, ctx context.Context) *systemdSuite {
	t.Helper()
	s := &systemdSuite{work: t.TempDir()}
	mirror, err := DebianMirror()
	if err != nil {
		t.Fatal(err)
	}
	if s.root, err = SystemdRoot(ctx, SystemdCacheDir(), mirror, t.Logf); err != nil {
		t.Fatal(err)
	}
	if s.deb, err = BuildDeb(ctx, runtimeGo(), repoRoot(t), "amd64", filepath.Join(s.work, "deb")); err != nil {
		t.Fatal(err)
	}
	if s.kernel, err = FindKernel(); err != nil {
		t.Fatal(err)
	}
	mods, err := s.kernel.ReadModules(SystemdModules())
	if err != nil {
		t.Fatal(err)
	}
	busybox, err := os.ReadFile(BusyboxStatic)
	if err != nil {
		t.Fatal(err)
	}
	s.initrd = filepath.Join(s.work, "initrd.img")
	if err := SystemdInitramfs(busybox, mods, s.initrd); err != nil {
		t.Fatal(err)
	}
	if s.signer, err = NewSigner(); err != nil {
		t.Fatal(err)
	}
	return s
}

// device is a new device with its broker, payload server and watcher.
func (s *systemdSuite) device(t *testing.T) *device {
	d := newNetDevice(t, &kit{signer: s.signer, kernel: s.kernel, slotMiB: systemdSlotMiB})
	d.cfg.CommitWindow = "180s"
	return d
}

// guest builds a slot image of the systemd guest.
func (s *systemdSuite) guest(t *testing.T, ctx context.Context, layout, version string, pre bool, cfg GuestConfig, out string) {
	t.Helper()
	begin := time.Now()
	g := SystemdGuest{Layout: layout, Version: version, Config: cfg, PublicKeyPEM: s.signer.PublicKeyPEM, Deb: s.deb.Path,
		Preinstalled: pre, Kernel: s.kernel, Initramfs: s.initrd}
	if err := g.Build(ctx, s.work, s.root, out, systemdSlotMiB); err != nil {
		t.Fatal(err)
	}
	t.Logf("image %s (%s) built in %s", version, layout, time.Since(begin).Round(100*time.Millisecond))
}

// pc: the factory image's first day, an update over MQTT, the reboot
// through systemd, the commit, the journal by priority.
func (s *systemdSuite) pc(t *testing.T, ctx context.Context) {
	d := s.device(t)
	slotA := filepath.Join(d.dir, "slotA.ext4")
	s.guest(t, ctx, "grub", "A-1", false, d.cfg, slotA)
	payload := filepath.Join(d.http.Dir, "rootfs-B-2.ext4")
	s.guest(t, ctx, "grub", "B-2", true, d.cfg, payload)
	img, err := HashImage(payload)
	if err != nil {
		t.Fatal(err)
	}
	d.machine = systemdPC(t, ctx, d, slotA)
	r := d.powerOn()
	phase, cancelPhase := context.WithTimeout(ctx, systemdPhase)
	d.expect(phase, r, bootingSlot("A"))
	d.expect(phase, r, regexp.QuoteMeta(MarkerSysBoot+" version=A-1 slot=A layout=grub"))
	d.expectVersions(phase, r, s.deb.Version)
	d.expect(phase, r, `E2E: config check: valid`)
	d.expect(phase, r, `E2E: dropin: DeviceAllow=/dev/vda3 rw`)
	d.expect(phase, r, `E2E: dropin: ReadWritePaths=-/boot/efi/EFI/BOOT`)
	d.expectActive(phase, r)
	d.expect(phase, r, regexp.QuoteMeta(MarkerSysWaiting))
	d.offer(ctx, "rel-b-2", img, d.http.URL(filepath.Base(payload)), time.Now())
	d.expect(phase, r, `E2E: otad: .*msg="offer accepted".*id=rel-b-2`)
	d.expect(phase, r, `E2E: otad: .*msg=rebooting`)
	d.expect(phase, r, `reboot: Restarting system`)
	cancelPhase()

	phase, cancelPhase = context.WithTimeout(ctx, systemdPhase)
	defer cancelPhase()
	d.expect(phase, r, bootingSlot("B"))
	d.expect(phase, r, regexp.QuoteMeta(MarkerSysBoot+" version=B-2 slot=B layout=grub"))
	d.expectActive(phase, r)
	d.expectVersions(phase, r, s.deb.Version)
	st := d.waitStatus(phase, "committed on B", settled("B", ota.ResultSuccess))
	if st.Slots["B"].SHA256 != img.SHA256 || st.LastResult.ID != "rel-b-2" {
		t.Errorf("after the commit: slot B %+v, last result %+v; want %s, rel-b-2", st.Slots["B"], st.LastResult, img.SHA256)
	}
	d.expect(phase, r, `E2E: status: broker: +mqtt://10\.0\.2\.2:[0-9]+ connected`)
	untrusted, err := NewSigner()
	if err != nil {
		t.Fatal(err)
	}
	bad, err := untrusted.Offer("rel-evil", "9.9", img, d.http.URL(filepath.Base(payload)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.fleet.Publish(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if fed := d.expect(phase, r, `E2E: watchdog fed: `); !strings.Contains(fed, "WatchdogUSec=1min") || !strings.Contains(fed, "NRestarts=0") {
		t.Errorf("watchdog: %q, want WatchdogUSec=1min (the shipped unit's) and no restart", fed)
	}
	d.expect(phase, r, `E2E: report done`)
	d.expect(phase, r, regexp.QuoteMeta(MarkerSysPoweroff))
	if err := r.Wait(phase); err != nil {
		t.Fatal(err)
	}
	checkJournal(t, r.Log.Lines())
	d.wantEnv(d.grubenv(ctx), map[string]string{"ORDER": "B A", "B_OK": "1", "B_TRY": "0", "A_OK": "1"})
}

// board: a U-Boot style board's first day: no ESP, the unit starts, otad's
// mark good reaches the environment device through the sandbox.
func (s *systemdSuite) board(t *testing.T, ctx context.Context) {
	d := s.device(t)
	envFile := systemdBoard(t, ctx, d, s)
	r := d.powerOn()
	phase, cancelPhase := context.WithTimeout(ctx, systemdPhase)
	defer cancelPhase()
	d.expect(phase, r, regexp.QuoteMeta(MarkerSysBoot+" version=U-1 slot=A layout=uboot"))
	d.expectVersions(phase, r, s.deb.Version)
	d.expect(phase, r, `E2E: config check: valid`)
	d.expect(phase, r, `E2E: dropin: DeviceAllow=/dev/vdb rw`)
	d.expectActive(phase, r)
	d.expect(phase, r, `E2E: no /boot/efi`)
	d.expect(phase, r, `E2E: status: broker: +mqtt://10\.0\.2\.2:[0-9]+ connected`)
	d.expect(phase, r, `E2E: report done`)
	if err := r.Wait(phase); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	vars, _, err := uboot.ParseEnv(b, false)
	if err != nil || vars["BOOT_A_LEFT"] != "3" || vars["BOOT_ORDER"] != "A B" || vars["bootcmd"] != "run distro_bootcmd" {
		t.Errorf("U-Boot env after the board's first day: %v, %v; want BOOT_A_LEFT=3 (otad's mark good), the rest kept", vars, err)
	}
}

// systemdPC is the PC: OVMF, GRUB with the shipped grub.cfg on the ESP,
// the factory image in slot A, slot B empty (B_OK=0), a data partition.
func systemdPC(t *testing.T, ctx context.Context, d *device, slotA string) Machine {
	t.Helper()
	efi := filepath.Join(d.dir, "BOOTX64.EFI")
	if err := BuildGrubEFI(ctx, efi); err != nil {
		t.Fatal(err)
	}
	env := filepath.Join(d.dir, "grubenv")
	if err := BuildGrubenv(ctx, env, map[string]string{"ORDER": "A B", "A_OK": "1", "A_TRY": "0", "B_OK": "0", "B_TRY": "0"}); err != nil {
		t.Fatal(err)
	}
	l := Layout{ESP: 32, Slot: systemdSlotMiB, Data: 16}
	esp := filepath.Join(d.dir, "esp.img")
	cfg := filepath.Join(repoRoot(t), "packaging", "bootloader", "grub.cfg")
	if err := BuildESP(ctx, esp, l.ESP, ESPFiles{GrubEFI: efi, GrubCfg: cfg, Grubenv: env}); err != nil {
		t.Fatal(err)
	}
	d.disk = d.systemdDisk(ctx, "disk.img", l, map[int]string{PartESP: esp, PartSlotA: slotA})
	m := Machine{Disk: d.disk.Path, Vars: filepath.Join(d.dir, "OVMF_VARS.fd"), Timeout: 2*systemdPhase + time.Minute}
	if err := CopyFile(OVMFVars, m.Vars); err != nil {
		t.Fatal(err)
	}
	return m
}

// systemdBoard sets d up as the U-Boot style board: no ESP, the factory
// image (uboot config) in slot A, the environment (as U-Boot left it after
// counting this boot down) on a second disk; the kernel handed over
// directly. It returns the environment's file.
func systemdBoard(t *testing.T, ctx context.Context, d *device, s *systemdSuite) string {
	t.Helper()
	cfg := d.cfg
	cfg.Bootloader = "uboot"
	slot := filepath.Join(d.dir, "slotU.ext4")
	s.guest(t, ctx, "uboot", "U-1", false, cfg, slot)
	l := Layout{ESP: 8, Slot: systemdSlotMiB, Data: 16, BootName: "boot"}
	boot := filepath.Join(d.dir, "boot.vfat")
	os.Remove(boot)
	if _, err := run(ctx, "mkfs.vfat", "-n", "BOOT", "-C", boot, fmt.Sprint(l.ESP*1024)); err != nil {
		t.Fatal(err)
	}
	disk := d.systemdDisk(ctx, "board.img", l, map[int]string{PartESP: boot, PartSlotA: slot})
	env, err := uboot.EncodeEnv(map[string]string{"BOOT_ORDER": "A B", "BOOT_A_LEFT": "2", "BOOT_B_LEFT": "3", "bootcmd": "run distro_bootcmd"}, 0x40000, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(d.dir, "uboot-env.img")
	if err := os.WriteFile(envFile, env, 0o644); err != nil {
		t.Fatal(err)
	}
	d.machine = DirectMachine{Kernel: s.kernel.Image, Initrd: s.initrd, Disks: []string{disk.Path, envFile}, Timeout: systemdPhase + time.Minute,
		Append: "root=/dev/vda2 ro console=ttyS0,115200 panic=10 otad.slot=A rauc.slot=A"}
	return envFile
}

// systemdDisk lays a disk out with an empty data partition.
func (d *device) systemdDisk(ctx context.Context, name string, l Layout, images map[int]string) *Disk {
	d.t.Helper()
	data := filepath.Join(d.dir, "data-"+name+".ext4")
	if _, err := run(ctx, "mkfs.ext4", "-q", "-F", "-L", "data", data, fmt.Sprintf("%dM", l.Data)); err != nil {
		d.t.Fatal(err)
	}
	images[PartData] = data
	disk, err := BuildDisk(ctx, filepath.Join(d.dir, name), l, images)
	if err != nil {
		d.t.Fatal(err)
	}
	return disk
}

// expectVersions: the package's version is what otad prints, and the
// device's package carries no otactl.
func (d *device) expectVersions(ctx context.Context, r *Run, version string) {
	d.t.Helper()
	line := d.expect(ctx, r, regexp.QuoteMeta(MarkerSysVersions))
	want := fmt.Sprintf("%s deb=%s otad=otad %s otactl=none", MarkerSysVersions, version, version)
	if !strings.Contains(line, want) {
		d.t.Errorf("versions: %q, want %q", line, want)
	}
}

// expectActive: the unit reached READY (Type=notify) and runs, unrestarted.
func (d *device) expectActive(ctx context.Context, r *Run) {
	d.t.Helper()
	line := d.expect(ctx, r, regexp.QuoteMeta(MarkerSysActive))
	for _, w := range []string{"ActiveState=active", "SubState=running", "Type=notify", "NRestarts=0"} {
		if !strings.Contains(line, w) {
			d.t.Errorf("otad.service: %q lacks %s", line, w)
		}
	}
}

// checkJournal: journalctl -p err shows exactly the errors, -p warning the
// warnings and errors, -p info the rest too; every line otad wrote is one
// of its log lines, with its level matching the entry's priority.
func checkJournal(t *testing.T, console []string) {
	t.Helper()
	by := map[string][]string{}
	for _, l := range console {
		for _, p := range []string{"err", "warning", "info"} {
			if rest, ok := strings.CutPrefix(l, "E2E: journal "+p+": "); ok {
				by[p] = append(by[p], rest)
			}
		}
	}
	levels := map[string][]string{"err": {"level=ERROR"}, "warning": {"level=ERROR", "level=WARN"}, "info": {"level=ERROR", "level=WARN", "level=INFO"}}
	for p, lines := range by {
		for _, l := range lines {
			ok := false
			for _, lv := range levels[p] {
				ok = ok || strings.HasPrefix(l, lv+" ")
			}
			if !ok {
				t.Errorf("journalctl -p %s shows %q", p, l)
			}
		}
	}
	for p, msgs := range map[string][]string{"err": {"reloading trusted keys"}, "warning": {"offer refused", "reloading trusted keys"},
		"info": {"otad running", "offer refused", "reloading trusted keys"}} {
		for _, m := range msgs {
			if !containsLine(by[p], m) {
				t.Errorf("journalctl -p %s lacks %q:\n%s", p, m, strings.Join(by[p], "\n"))
			}
		}
	}
	if containsLine(by["warning"], "otad running") {
		t.Errorf("journalctl -p warning shows an info line:\n%s", strings.Join(by["warning"], "\n"))
	}
}

func containsLine(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
