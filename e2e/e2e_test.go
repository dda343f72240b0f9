//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/otad/otad/ota"
)

// Budgets under TCG. An OVMF+GRUB+kernel boot took ~10 s (docs/e2e.md); these
// leave room for a loaded CI machine without letting a stuck guest eat the suite.
const (
	bootBudget     = 90 * time.Second  // power on to otad running
	scenarioBudget = 240 * time.Second // one whole scenario
	payloadMiB     = 32                // slot filesystem = update payload
)

// suite holds what every GRUB scenario shares: the image kit, the GRUB EFI
// binary and the shipped grub.cfg.
type suite struct {
	kit     *kit
	grubEFI string
	grubCfg string
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	requireAll(t, Missing())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k, err := FindKernel()
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{kit: newKit(t, ctx, X86GRUB(), k, BusyboxStatic, payloadMiB)}
	s.grubEFI = filepath.Join(t.TempDir(), "BOOTX64.EFI")
	if err := BuildGrubEFI(ctx, s.grubEFI); err != nil {
		t.Fatal(err)
	}
	s.grubCfg = filepath.Join(repoRoot(t), "packaging", "bootloader", "grub.cfg")
	return s
}

// newDevice builds a factory disk: slot A and slot B hold the same image
// ("A-1"), grubenv ORDER="A B" A_OK=1 A_TRY=0 B_OK=1 B_TRY=0.
func (s *suite) newDevice(t *testing.T, ctx context.Context) *device {
	t.Helper()
	d := newNetDevice(t, s.kit)
	env := filepath.Join(d.dir, "grubenv")
	if err := BuildGrubenv(ctx, env, map[string]string{"ORDER": "A B", "A_OK": "1", "A_TRY": "0", "B_OK": "1", "B_TRY": "0"}); err != nil {
		t.Fatal(err)
	}
	l := DefaultLayout()
	esp := filepath.Join(d.dir, "esp.img")
	if err := BuildESP(ctx, esp, l.ESP, ESPFiles{GrubEFI: s.grubEFI, GrubCfg: s.grubCfg, Grubenv: env}); err != nil {
		t.Fatal(err)
	}
	d.factoryDisk(ctx, l, esp)
	m := Machine{Disk: d.disk.Path, Vars: filepath.Join(d.dir, "OVMF_VARS.fd"), Timeout: scenarioBudget + time.Minute}
	if err := CopyFile(OVMFVars, m.Vars); err != nil {
		t.Fatal(err)
	}
	d.machine = m
	return d
}

// grubenv reads the boot variables from the disk image (QEMU stopped).
func (d *device) grubenv(ctx context.Context) map[string]string {
	d.t.Helper()
	env, err := d.disk.ReadGrubenv(ctx, d.dir)
	if err != nil {
		d.t.Fatal(err)
	}
	return env
}

func (d *device) wantEnv(env map[string]string, want map[string]string) {
	d.t.Helper()
	for k, v := range want {
		if env[k] != v {
			d.t.Errorf("boot env %s=%q, want %q (all: %v)", k, env[k], v, env)
		}
	}
}

// Console lines of the boot chain.
func bootingSlot(s string) string { return regexp.QuoteMeta("otad: booting slot " + s) }
func initOf(version, slot string) string {
	return regexp.QuoteMeta(MarkerInit + " version=" + version + " slot=" + slot)
}
func otadRunning(slot string) string { return `otad running.*booted=` + slot }

func TestQEMU(t *testing.T) {
	s := newSuite(t)
	var scenarios []scenario
	for _, sc := range []struct {
		name string
		run  func(t *testing.T, ctx context.Context, d *device)
	}{
		{"0_boot", scenarioBoot},
		{"1_good_update", scenarioGoodUpdate},
		{"2_hang_rolls_back", scenarioHang},
		{"3_health_check_fails", scenarioHealthFails},
		{"4_power_cut_mid_write", scenarioPowerCut},
		{"5_offer_storm", scenarioStorm},
		{"6_chunked_power_cut", scenarioChunkedPowerCut},
	} {
		scenarios = append(scenarios, scenario{sc.name, func(t *testing.T, ctx context.Context) {
			start := time.Now()
			d := s.newDevice(t, ctx)
			t.Logf("images built in %s", time.Since(start).Round(100*time.Millisecond))
			sc.run(t, ctx, d)
		}})
	}
	runScenarios(t, scenarioBudget, scenarios)
}

// scenarioBoot proves the chain: OVMF → GRUB (grub.cfg picks A) → kernel →
// busybox init → otad on slot A, which marks A good in the grubenv.
func scenarioBoot(t *testing.T, ctx context.Context, d *device) {
	r := d.powerOn()
	bctx, cancel := context.WithTimeout(ctx, bootBudget)
	defer cancel()
	d.expect(bctx, r, bootingSlot("A"))
	d.expect(bctx, r, initOf("A-1", "A"))
	d.expect(bctx, r, otadRunning("A"))
	d.expect(bctx, r, `mark=good slot=A`)
	st := d.waitStatus(bctx, "idle on A", func(s ota.Status) bool { return s.BootedSlot == "A" && s.State == ota.Idle })
	if st.Device != GuestDeviceID {
		t.Errorf("status device %q, want %q", st.Device, GuestDeviceID)
	}
	r.Kill()
	// GRUB saved A_TRY=1 before booting; otad's mark good reset it in place.
	d.wantEnv(d.grubenv(ctx), map[string]string{"ORDER": "A B", "A_OK": "1", "A_TRY": "0", "B_OK": "1"})
}

func scenarioGoodUpdate(t *testing.T, ctx context.Context, d *device) {
	r := d.powerOnA(ctx)
	img := d.offerImage(ctx, "B-2", Healthy, d.cfg, time.Now())
	d.expect(ctx, r, `offer accepted.*id=rel-b-2`)
	d.expect(ctx, r, regexp.QuoteMeta(MarkerReboot))
	d.expect(ctx, r, bootingSlot("B"))
	d.expectCommitted(ctx, r, "B-2", "rel-b-2", img)
	r.Kill()
	d.wantEnv(d.grubenv(ctx), map[string]string{"ORDER": "B A", "B_OK": "1", "B_TRY": "0", "A_OK": "1"})
}

func scenarioHang(t *testing.T, ctx context.Context, d *device) {
	r := d.powerOnA(ctx)
	d.offerImage(ctx, "B-hang", Hang, d.cfg, time.Now())
	d.expect(ctx, r, regexp.QuoteMeta(MarkerReboot))
	d.expect(ctx, r, bootingSlot("B"))
	d.expect(ctx, r, regexp.QuoteMeta(MarkerHang))
	// No feeding: the i6300esb resets the machine and GRUB, seeing B_TRY=1, boots A.
	d.expect(ctx, r, bootingSlot("A"))
	d.expect(ctx, r, otadRunning("A"))
	st := d.waitStatus(ctx, "rolled back", func(s ota.Status) bool {
		return s.BootedSlot == "A" && s.LastResult != nil && s.LastResult.Result == ota.ResultRolledBack
	})
	if st.LastResult.ID != "rel-b-hang" {
		t.Errorf("rolled back %+v, want id rel-b-hang", st.LastResult)
	}
	// The result is journaled and published before the bootloader marks.
	d.expect(ctx, r, `mark=bad slot=B`)
	d.expect(ctx, r, `mark=good slot=A`)
	r.Kill()
	// B is out of ORDER (padded in place), as mark bad does for U-Boot's BOOT_ORDER.
	d.wantEnv(d.grubenv(ctx), map[string]string{"ORDER": "A  ", "A_OK": "1", "A_TRY": "0", "B_OK": "0"})
}

func scenarioHealthFails(t *testing.T, ctx context.Context, d *device) {
	r := d.powerOnA(ctx)
	bad := d.cfg
	bad.CommitWindow = "15s" // the health check retries every 5 s within the window
	d.offerImage(ctx, "B-unhealthy", Unhealthy, bad, time.Now())
	d.expect(ctx, r, bootingSlot("B"))
	d.expect(ctx, r, initOf("B-unhealthy", "B"))
	d.expect(ctx, r, regexp.QuoteMeta(MarkerHealthFail))
	d.expect(ctx, r, regexp.QuoteMeta(MarkerReboot))
	d.expect(ctx, r, bootingSlot("A"))
	d.expect(ctx, r, otadRunning("A"))
	st := d.waitStatus(ctx, "health check failed", func(s ota.Status) bool {
		return s.BootedSlot == "A" && s.State == ota.Idle && s.LastResult != nil && s.LastResult.Code == ota.CodeHealthCheckFailed
	})
	if st.LastResult.Result != ota.ResultFailed || st.LastResult.ID != "rel-b-unhealthy" {
		t.Errorf("last result %+v, want failed rel-b-unhealthy", st.LastResult)
	}
	d.expect(ctx, r, `mark=good slot=A`)
	r.Kill()
	d.wantEnv(d.grubenv(ctx), map[string]string{"A_OK": "1", "A_TRY": "0", "B_OK": "0"})
}

func scenarioPowerCut(t *testing.T, ctx context.Context, d *device) {
	r := d.powerOnA(ctx)
	d.http.Throttle(2 << 20) // ~16 s for the image: time to cut the power mid-write
	img := d.offerImage(ctx, "B-3", Healthy, d.cfg, time.Now())
	p, err := d.fleet.WaitProgress(ctx, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%6.1fs  power cut at %d/%d bytes", time.Since(r.Started).Seconds(), p.BytesDone, p.BytesTotal)
	r.Kill()
	// Slot B was marked bad (and left ORDER) before the first byte: GRUB must not boot it.
	d.wantEnv(d.grubenv(ctx), map[string]string{"ORDER": "A  ", "B_OK": "0", "A_OK": "1"})
	d.http.Throttle(0)
	r = d.powerOn()
	d.expect(ctx, r, bootingSlot("A"))
	d.expect(ctx, r, otadRunning("A"))
	d.expect(ctx, r, bootingSlot("B"))
	d.expect(ctx, r, initOf("B-3", "B"))
	st := d.waitStatus(ctx, "committed on B after the power cut", settled("B", ota.ResultSuccess))
	if st.Slots["B"].SHA256 != img.SHA256 {
		t.Errorf("slot B %+v, want sha256 %s", st.Slots["B"], img.SHA256)
	}
	d.expect(ctx, r, `mark=good slot=B`)
	r.Kill()
	d.wantEnv(d.grubenv(ctx), map[string]string{"ORDER": "B A", "B_OK": "1", "B_TRY": "0"})
}

// scenarioStorm publishes offers faster than the device can install them:
// the install in progress is superseded, duplicates and an older offer change
// nothing, and the newest offer (published last, so it is also the retained
// desired state) is what lands.
func scenarioStorm(t *testing.T, ctx context.Context, d *device) {
	r := d.powerOnA(ctx)
	var imgs []Image
	var urls []string
	for _, v := range []string{"B-s1", "B-s2", "B-s3"} {
		img, url := d.payload(ctx, v, Healthy, d.cfg)
		imgs, urls = append(imgs, img), append(urls, url)
	}
	d.http.Throttle(4 << 20)
	base := time.Now()
	d.offer(ctx, "rel-s1", imgs[0], urls[0], base)
	if _, err := d.fleet.WaitProgress(ctx, 1<<20); err != nil {
		t.Fatal(err)
	}
	d.offer(ctx, "rel-s2", imgs[1], urls[1], base.Add(1*time.Second))
	d.offer(ctx, "rel-s1", imgs[0], urls[0], base)
	d.offer(ctx, "rel-s2", imgs[1], urls[1], base.Add(1*time.Second))
	d.offer(ctx, "rel-s3", imgs[2], urls[2], base.Add(2*time.Second))
	d.http.Throttle(0)
	d.waitStatus(ctx, "rel-s1 superseded", func(s ota.Status) bool {
		return s.LastResult != nil && s.LastResult.ID == "rel-s1" && s.LastResult.Result == ota.ResultSuperseded
	})
	d.expect(ctx, r, bootingSlot("B"))
	d.expect(ctx, r, initOf("B-s3", "B"))
	st := d.waitStatus(ctx, "newest offer committed", settled("B", ota.ResultSuccess))
	if st.Slots["B"].SHA256 != imgs[2].SHA256 || st.LastResult.ID != "rel-s3" {
		t.Errorf("after the storm: slot B %+v, last %+v; want rel-s3 %s", st.Slots["B"], st.LastResult, imgs[2].SHA256)
	}
	d.expect(ctx, r, `mark=good slot=B`)
	r.Kill()
	d.wantEnv(d.grubenv(ctx), map[string]string{"ORDER": "B A", "B_OK": "1", "B_TRY": "0"})
}
