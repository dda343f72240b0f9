//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// Budgets of the U-Boot suite under TCG: U-Boot reaches the kernel in under a
// second and the initramfs runs at ~2 s (docs/e2e.md); the arm64 otad is slower to
// hash and write than the x86 one.
const (
	ubootScenarioBudget = 300 * time.Second
	ubootRunBudget      = 60 * time.Second // one QEMU run that is expected to end by itself
	ubootSlotMiB        = 44               // the arm64 kernel (an uncompressed 32 MiB Image) and the initramfs
)

// factoryEnv is what the factory saves in the env next to U-Boot's defaults:
// no autoboot delay, and panic=-1 for the kernel (through the boot scripts'
// otad_bootargs and RAUC's default_bootargs) so a panicking slot resets at
// once and the attempt is counted.
func factoryEnv() map[string]string {
	return map[string]string{"bootdelay": "0", "otad_bootargs": "panic=-1", "default_bootargs": "panic=-1"}
}

// ubootSuite holds what every U-Boot scenario shares.
type ubootSuite struct {
	kit     *kit
	flash0  string // U-Boot
	flash1  string // the factory env flash, copied to every device
	bootScr string // packaging/bootloader/boot.cmd, compiled
	raucScr string // testdata/rauc/uboot.sh, compiled
}

func newUBootSuite(t *testing.T) *ubootSuite {
	t.Helper()
	requireAll(t, MissingUBoot())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	arm, err := FindArm64(Arm64Dir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &ubootSuite{
		kit:    newKit(t, ctx, Arm64UBoot(), arm.Kernel, arm.Busybox, ubootSlotMiB),
		flash0: filepath.Join(dir, "flash0.img"), flash1: filepath.Join(dir, "flash1.factory.img"),
		bootScr: filepath.Join(dir, "boot.scr"), raucScr: filepath.Join(dir, "rauc-boot.scr"),
	}
	if err := BuildFlash0(s.flash0); err != nil {
		t.Fatal(err)
	}
	if err := BuildBootScript(ctx, filepath.Join(repoRoot(t), "packaging", "bootloader", "boot.cmd"), s.bootScr); err != nil {
		t.Fatal(err)
	}
	if err := BuildBootScript(ctx, filepath.Join("testdata", "rauc", "uboot.sh"), s.raucScr); err != nil {
		t.Fatal(err)
	}
	if err := BlankFlash(s.flash1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	log := filepath.Join(dir, "provision.log")
	if err := ProvisionUBootEnv(ctx, s.flash0, s.flash1, log, factoryEnv()); err != nil {
		out, _ := os.ReadFile(log)
		t.Fatalf("factory env: %v\n%s", err, out)
	}
	env, err := ReadUBootEnv(ctx, s.flash1, dir)
	if err != nil {
		t.Fatalf("fw_printenv of the factory env: %v", err)
	}
	for k, v := range factoryEnv() {
		if env[k] != v {
			t.Fatalf("factory env %s=%q, want %q (all: %v)", k, env[k], v, env)
		}
	}
	if env["bootcmd"] == "" {
		t.Fatalf("factory env lacks U-Boot's own defaults: %v", env)
	}
	t.Logf("factory env saved by U-Boot in %s (%d variables)", time.Since(start).Round(100*time.Millisecond), len(env))
	return s
}

// ubootDevice is a device with U-Boot; flash1 is its env flash.
type ubootDevice struct {
	*device
	flash1  string
	machine *UBootMachine
}

// newDevice builds a factory device: the FAT boot partition with script
// (boot.scr), slots A and B both holding "A-1", an empty data partition, and
// the factory env. envChunkKB goes to every userland (Userland.EnvChunkKB).
func (s *ubootSuite) newDevice(t *testing.T, ctx context.Context, script string, envChunkKB int) *ubootDevice {
	t.Helper()
	d := &ubootDevice{device: newNetDevice(t, s.kit)}
	d.cfg.Bootloader = "uboot"
	d.envChunkKB = envChunkKB
	d.flash1 = filepath.Join(d.dir, "flash1.img")
	if err := CopyFile(s.flash1, d.flash1); err != nil {
		t.Fatal(err)
	}
	l := Layout{ESP: 16, Slot: 48, Data: 16}
	boot := filepath.Join(d.dir, "boot.fat")
	if err := BuildBootFAT(ctx, boot, l.ESP, script); err != nil {
		t.Fatal(err)
	}
	d.factoryDisk(ctx, l, boot)
	d.machine = &UBootMachine{Flash0: s.flash0, Flash1: d.flash1, Disk: d.disk.Path, Timeout: ubootScenarioBudget}
	d.device.machine = d.machine
	return d
}

// ended waits for a run to end by itself: -no-reboot turns the guest's
// reboot, watchdog reset or panic into QEMU's exit.
func (d *ubootDevice) ended(ctx context.Context, r *Run) {
	d.t.Helper()
	wctx, cancel := context.WithTimeout(ctx, ubootRunBudget)
	defer cancel()
	if err := r.Wait(wctx); err != nil {
		d.t.Fatalf("run %d did not end (reset) by itself: %v", d.runIndex(r), err)
	}
	d.t.Logf("run %d %6.1fs  QEMU exited (the guest reset)", d.runIndex(r), time.Since(r.Started).Seconds())
}

// env reads the env flash with fw_printenv (QEMU stopped or between writes).
func (d *ubootDevice) env(ctx context.Context) map[string]string {
	d.t.Helper()
	env, err := ReadUBootEnv(ctx, d.flash1, d.dir)
	if err != nil {
		d.t.Fatal(err)
	}
	return env
}

// wantUBootEnv checks variables of the env flash; "" means unset. The
// factory variables must survive every write otad and U-Boot make.
func (d *ubootDevice) wantUBootEnv(ctx context.Context, want map[string]string) {
	d.t.Helper()
	env := d.env(ctx)
	for k, v := range factoryEnv() {
		if _, ok := want[k]; !ok {
			want[k] = v
		}
	}
	for k, v := range want {
		if got, ok := env[k]; got != v || (v == "" && ok) {
			d.t.Errorf("u-boot env %s=%q, want %q", k, got, v)
		}
	}
	d.t.Logf("u-boot env: BOOT_ORDER=%q BOOT_A_LEFT=%q BOOT_B_LEFT=%q", env["BOOT_ORDER"], env["BOOT_A_LEFT"], env["BOOT_B_LEFT"])
}

// Console lines of the shipped boot.cmd and of RAUC's script.
func ubootPicks(slot string, left int) string {
	return regexp.QuoteMeta(fmt.Sprintf("otad: slot %s, %x attempts left after this one", slot, left))
}
func ubootSkips(slot string) string {
	return regexp.QuoteMeta("otad: slot " + slot + " has no attempts left")
}
func raucPicks(slot string, left int) string {
	return regexp.QuoteMeta(fmt.Sprintf("Found valid slot %s, %x attempts remaining", slot, left))
}

func TestUBoot(t *testing.T) {
	s := newUBootSuite(t)
	runScenarios(t, ubootScenarioBudget, []scenario{
		{"1_good_update", func(t *testing.T, ctx context.Context) { ubootGoodUpdate(t, ctx, s) }},
		{"2_hang_falls_back", func(t *testing.T, ctx context.Context) { ubootHangFallsBack(t, ctx, s) }},
		{"3_power_cut_env_write", func(t *testing.T, ctx context.Context) { ubootPowerCutEnvWrite(t, ctx, s) }},
		{"4_rauc_script", func(t *testing.T, ctx context.Context) { ubootRAUCScript(t, ctx, s) }},
	})
}

// ubootGoodUpdate: otad on slot A takes an offer over MQTT, fetches the image
// over HTTP, writes slot B and flips BOOT_ORDER through the env; the next run
// of U-Boot boots B, the health check passes, and otad commits.
func ubootGoodUpdate(t *testing.T, ctx context.Context, s *ubootSuite) {
	d := s.newDevice(t, ctx, s.bootScr, 0)
	r := d.powerOn()
	d.expect(ctx, r, ubootPicks("A", 2))
	d.expect(ctx, r, initOf("A-1", "A"))
	d.expect(ctx, r, otadRunning("A"))
	d.expect(ctx, r, `mark=good slot=A`)
	img := d.offerImage(ctx, "B-2", Healthy, d.cfg, time.Now())
	d.expect(ctx, r, `offer accepted.*id=rel-b-2`)
	d.expect(ctx, r, `mark=active slot=B`)
	d.expect(ctx, r, regexp.QuoteMeta(MarkerReboot))
	d.ended(ctx, r)
	d.wantUBootEnv(ctx, map[string]string{"BOOT_ORDER": "B A", "BOOT_B_LEFT": "3", "BOOT_A_LEFT": "3"})

	r = d.powerOn()
	d.expect(ctx, r, ubootPicks("B", 2))
	d.expectCommitted(ctx, r, "B-2", "rel-b-2", img)
	r.Kill()
	d.wantUBootEnv(ctx, map[string]string{"BOOT_ORDER": "B A", "BOOT_B_LEFT": "3", "BOOT_A_LEFT": "3"})
}

// ubootHangFallsBack: the new slot's init hangs; the watchdog resets it, and
// U-Boot counts its attempts down across three runs, then boots A, where otad
// reports rolled_back and takes B out of BOOT_ORDER.
func ubootHangFallsBack(t *testing.T, ctx context.Context, s *ubootSuite) {
	d := s.newDevice(t, ctx, s.bootScr, 0)
	r := d.powerOnA(ctx)
	d.offerImage(ctx, "B-hang", Hang, d.cfg, time.Now())
	d.expect(ctx, r, regexp.QuoteMeta(MarkerReboot))
	d.ended(ctx, r)
	for left := UBootAttempts - 1; left >= 0; left-- {
		r = d.powerOn()
		d.expect(ctx, r, ubootPicks("B", left))
		d.expect(ctx, r, regexp.QuoteMeta(MarkerHang))
		d.ended(ctx, r) // the i6300esb resets the guest ~5 s later
	}
	r = d.powerOn()
	d.expect(ctx, r, ubootSkips("B"))
	d.expect(ctx, r, ubootPicks("A", UBootAttempts-1))
	d.expect(ctx, r, otadRunning("A"))
	st := d.waitStatus(ctx, "rolled back", settled("A", ota.ResultRolledBack))
	if st.LastResult.ID != "rel-b-hang" {
		t.Errorf("rolled back %+v, want id rel-b-hang", st.LastResult)
	}
	d.expect(ctx, r, `mark=bad slot=B`)
	d.expect(ctx, r, `mark=good slot=A`)
	r.Kill()
	d.wantUBootEnv(ctx, map[string]string{"BOOT_ORDER": "A", "BOOT_A_LEFT": "3", "BOOT_B_LEFT": "0"})
}

// ubootPowerCutEnvWrite cuts the power while otad writes the env to flip to
// the new slot. This flash holds one copy of the env (no CONFIG_ENV_ADDR_REDUND),
// so nothing makes that write atomic:
//
//   - a cut before the write starts or after it ends loses nothing;
//   - a cut during it can leave a copy whose CRC fails (here: the first page
//     new, the rest old). U-Boot then runs on its compiled-in default
//     environment, and every saved variable is gone: otad's BOOT_ORDER and
//     counters, and the factory's own (bootdelay, otad_bootargs). The boot
//     script's defaults ("A B", 3 attempts each) pick slot A, and its saveenv
//     writes a valid env again.
//
// The device still boots (slot A, a complete image), and otad, whose journal
// says staged, sees that the flip did not happen and makes it again.
func ubootPowerCutEnvWrite(t *testing.T, ctx context.Context, s *ubootSuite) {
	// The guest writes the env in 4 KiB requests; once slot B is marked bad,
	// at 8 KiB/s: the next write, otad's 256 KiB mark active, would take 32 s,
	// a page every half second.
	d := s.newDevice(t, ctx, s.bootScr, 4)
	d.machine.QMP = filepath.Join(d.dir, "qmp.sock")
	r := d.powerOnA(ctx)
	img := d.offerImage(ctx, "B-3", Healthy, d.cfg, time.Now())
	d.expect(ctx, r, `mark=bad slot=B`)
	before, err := os.ReadFile(d.flash1)
	if err != nil {
		t.Fatal(err)
	}
	before = before[:EnvSize]
	if err := d.machine.ThrottleEnvWrites(ctx, 8<<10); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(d.flash1); !bytes.Equal(now[:EnvSize], before) {
		t.Fatal("otad wrote the env again before the throttle was on")
	}
	// The next env write is mark active ("A" becomes "B A"): cut the power as
	// soon as its first page lands. The variables are sorted and the BOOT_*
	// ones come first, so the longer BOOT_ORDER shifts everything after it and
	// the new first page does not fit the old second one.
	for {
		now, err := os.ReadFile(d.flash1)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(now[:EnvSize], before) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("otad never wrote the env after mark bad: %v", ctx.Err())
		case <-r.Done():
			t.Fatal("QEMU ended before otad wrote the env")
		case <-time.After(5 * time.Millisecond):
		}
	}
	r.Kill()
	t.Logf("run 0 %6.1fs  power cut while otad writes the env (mark active B)", time.Since(r.Started).Seconds())
	torn, _ := os.ReadFile(d.flash1)
	var changed []int
	for i := 0; i < EnvSize; i += 4096 {
		if !bytes.Equal(torn[i:i+4096], before[i:i+4096]) {
			changed = append(changed, i/4096)
		}
	}
	t.Logf("the cut left env pages %v of %d rewritten", changed, EnvSize/4096)
	if _, err := ReadUBootEnv(ctx, d.flash1, d.dir); !errors.Is(err, ErrNoEnv) {
		t.Fatalf("after the cut fw_printenv reads %v; want a torn env (bad CRC)", err)
	}

	d.machine.QMP = ""
	r = d.powerOn()
	d.expect(ctx, r, `bad CRC, using default environment`)
	d.expect(ctx, r, ubootPicks("A", 2))
	d.expect(ctx, r, initOf("A-1", "A"))
	d.expect(ctx, r, otadRunning("A"))
	d.expect(ctx, r, `mark=active slot=B`)
	d.expect(ctx, r, regexp.QuoteMeta(MarkerReboot))
	d.ended(ctx, r)
	r = d.powerOn()
	d.expect(ctx, r, ubootPicks("B", 2))
	d.expect(ctx, r, initOf("B-3", "B"))
	st := d.waitStatus(ctx, "committed on B after the torn env", settled("B", ota.ResultSuccess))
	if st.Slots["B"].SHA256 != img.SHA256 || st.LastResult.ID != "rel-b-3" {
		t.Errorf("slot B %+v, last %+v; want rel-b-3 %s", st.Slots["B"], st.LastResult, img.SHA256)
	}
	d.expect(ctx, r, `mark=good slot=B`)
	r.Kill()
	// What the torn write cost: the factory's variables are U-Boot's defaults again.
	d.wantUBootEnv(ctx, map[string]string{"BOOT_ORDER": "B A", "BOOT_B_LEFT": "3",
		"bootdelay": "2", "otad_bootargs": "", "default_bootargs": ""})
}

// ubootRAUCScript runs RAUC's example U-Boot script (testdata/rauc/uboot.sh,
// only its kernel loading adapted) with otad writing the env: an update that
// commits, then one whose kernel panics three times, after which the script
// falls back and otad reports rolled_back.
func ubootRAUCScript(t *testing.T, ctx context.Context, s *ubootSuite) {
	d := s.newDevice(t, ctx, s.raucScr, 0)
	r := d.powerOn()
	d.expect(ctx, r, raucPicks("A", 3))
	d.expect(ctx, r, otadRunning("A"))
	d.offerImage(ctx, "B-2", Healthy, d.cfg, time.Now())
	d.expect(ctx, r, regexp.QuoteMeta(MarkerReboot))
	d.ended(ctx, r)
	r = d.powerOn()
	d.expect(ctx, r, raucPicks("B", 3))
	d.expect(ctx, r, initOf("B-2", "B"))
	d.waitStatus(ctx, "committed on B", func(s ota.Status) bool {
		return s.BootedSlot == "B" && s.State == ota.Idle && s.LastResult != nil && s.LastResult.Result == ota.ResultSuccess && s.LastResult.ID == "rel-b-2"
	})
	d.expect(ctx, r, `mark=good slot=B`)

	// Slot A gets an image whose init exits: the kernel panics, and
	// panic=-1 resets at once.
	d.offerImage(ctx, "A-panic", Panic, d.cfg, time.Now().Add(time.Second))
	d.expect(ctx, r, regexp.QuoteMeta(MarkerReboot))
	d.ended(ctx, r)
	for left := UBootAttempts; left > 0; left-- {
		r = d.powerOn()
		d.expect(ctx, r, raucPicks("A", left))
		d.expect(ctx, r, regexp.QuoteMeta(MarkerPanic))
		d.expect(ctx, r, `Kernel panic`)
		d.ended(ctx, r)
	}
	r = d.powerOn()
	d.expect(ctx, r, raucPicks("B", UBootAttempts))
	d.expect(ctx, r, initOf("B-2", "B"))
	st := d.waitStatus(ctx, "rolled back", settled("B", ota.ResultRolledBack))
	if st.LastResult.ID != "rel-a-panic" {
		t.Errorf("rolled back %+v, want id rel-a-panic", st.LastResult)
	}
	d.expect(ctx, r, `mark=bad slot=A`)
	r.Kill()
	d.wantUBootEnv(ctx, map[string]string{"BOOT_ORDER": "B", "BOOT_A_LEFT": "0", "BOOT_B_LEFT": "3"})
}
