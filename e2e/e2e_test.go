//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"

	"github.com/otad/otad/ota"
)

// Budgets under TCG. QEMU.md measured ~10 s per OVMF+GRUB+kernel boot; these
// leave room for a loaded CI machine without letting a stuck guest eat the suite.
const (
	bootBudget     = 90 * time.Second  // power on to otad running
	scenarioBudget = 240 * time.Second // one whole scenario
	payloadMiB     = 32                // slot filesystem = update payload
)

// suite holds what every scenario shares: the otad binary, busybox, kernel
// modules, the GRUB EFI binary and the signing key.
type suite struct {
	dir     string
	kernel  Kernel
	otad    []byte
	busybox []byte
	modules map[string][]byte
	grubEFI string
	grubCfg string
	signer  *Signer
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	if miss := Missing(); len(miss) > 0 {
		msg := "e2e needs: " + strings.Join(miss, ", ")
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := &suite{dir: t.TempDir()}
	var err error
	if s.kernel, err = FindKernel(); err != nil {
		t.Fatal(err)
	}
	root := repoRoot(t)
	bin := filepath.Join(s.dir, "otad")
	build := exec.CommandContext(ctx, runtimeGo(), "build", "-trimpath", "-ldflags", "-s -w -X main.version=e2e", "-o", bin, "./cmd/otad")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build otad: %v\n%s", err, out)
	}
	if s.otad, err = os.ReadFile(bin); err != nil {
		t.Fatal(err)
	}
	if s.busybox, err = os.ReadFile(BusyboxStatic); err != nil {
		t.Fatal(err)
	}
	if s.modules, err = s.kernel.ReadModules(append(Modules(), "i6300esb")); err != nil {
		t.Fatal(err)
	}
	s.grubEFI = filepath.Join(s.dir, "BOOTX64.EFI")
	if err := BuildGrubEFI(ctx, s.grubEFI); err != nil {
		t.Fatal(err)
	}
	s.grubCfg = filepath.Join(root, "packaging", "bootloader", "grub.cfg")
	if s.signer, err = NewSigner(); err != nil {
		t.Fatal(err)
	}
	return s
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd) // the tests run in e2e/
}

// runtimeGo is the go command that runs these tests.
func runtimeGo() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// device is one scenario's emulated device with its broker and HTTP server.
type device struct {
	t       *testing.T
	s       *suite
	dir     string
	broker  *mosquittotest.Broker
	http    *PayloadServer
	fleet   *Fleet
	disk    *Disk
	machine Machine
	runs    []*Run
	cfg     GuestConfig
}

// newDevice builds a factory disk: slot A and slot B hold the same image
// ("A-1"), grubenv ORDER="A B" A_OK=1 A_TRY=0 B_OK=1 B_TRY=0.
func (s *suite) newDevice(t *testing.T, ctx context.Context) *device {
	t.Helper()
	d := &device{t: t, s: s, dir: t.TempDir()}
	d.broker = mosquittotest.Start(t, mosquittotest.Options{})
	payloads := filepath.Join(d.dir, "payloads")
	if err := os.Mkdir(payloads, 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	if d.http, err = StartPayloadServer(payloads); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.http.Close() })
	wctx, wcancel := context.WithCancel(context.Background())
	t.Cleanup(wcancel)
	if d.fleet, err = WatchFleet(wctx, d.broker.URL); err != nil {
		t.Fatal(err)
	}
	d.cfg = GuestConfig{BrokerPort: d.broker.Port, CommitWindow: "60s", HealthCommand: true}

	slotA := filepath.Join(d.dir, "slotA.ext4")
	if err := BuildSlotImage(ctx, d.dir, s.kernel, d.userland("A-1", Healthy), slotA, payloadMiB); err != nil {
		t.Fatal(err)
	}
	env := filepath.Join(d.dir, "grubenv")
	if err := BuildGrubenv(ctx, env, map[string]string{"ORDER": "A B", "A_OK": "1", "A_TRY": "0", "B_OK": "1", "B_TRY": "0"}); err != nil {
		t.Fatal(err)
	}
	l := DefaultLayout()
	esp := filepath.Join(d.dir, "esp.img")
	if err := BuildESP(ctx, esp, l.ESP, ESPFiles{GrubEFI: s.grubEFI, GrubCfg: s.grubCfg, Grubenv: env}); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(d.dir, "data.ext4")
	if _, err := run(ctx, "mkfs.ext4", "-q", "-F", "-L", "data", data, fmt.Sprintf("%dM", l.Data)); err != nil {
		t.Fatal(err)
	}
	d.disk, err = BuildDisk(ctx, filepath.Join(d.dir, "disk.img"), l, map[int]string{
		PartESP: esp, PartSlotA: slotA, PartSlotB: slotA, PartData: data,
	})
	if err != nil {
		t.Fatal(err)
	}
	d.machine = Machine{Disk: d.disk.Path, Vars: filepath.Join(d.dir, "OVMF_VARS.fd"), Timeout: scenarioBudget + time.Minute}
	if err := CopyFile(OVMFVars, d.machine.Vars); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.report)
	return d
}

func (d *device) userland(version string, b Behaviour) Userland {
	return Userland{
		Version: version, Behaviour: b, Config: d.cfg, PublicKeyPEM: d.s.signer.PublicKeyPEM,
		OtadBinary: d.s.otad, Busybox: d.s.busybox, Modules: d.s.modules,
	}
}

// payload builds a slot image for the update and puts it on the HTTP server.
func (d *device) payload(ctx context.Context, version string, b Behaviour, cfg GuestConfig) (Image, string) {
	d.t.Helper()
	u := d.userland(version, b)
	u.Config = cfg
	name := "rootfs-" + version + ".ext4"
	path := filepath.Join(d.http.Dir, name)
	if err := BuildSlotImage(ctx, d.dir, d.s.kernel, u, path, payloadMiB); err != nil {
		d.t.Fatal(err)
	}
	img, err := HashImage(path)
	if err != nil {
		d.t.Fatal(err)
	}
	return img, d.http.URL(name)
}

// offer signs and publishes an offer for img on the device's desired topic.
func (d *device) offer(ctx context.Context, id string, img Image, url string, issued time.Time) {
	d.t.Helper()
	env, err := d.s.signer.Offer(id, id, img, url, issued)
	if err != nil {
		d.t.Fatal(err)
	}
	if err := d.fleet.Publish(ctx, env); err != nil {
		d.t.Fatal(err)
	}
}

// powerOn starts QEMU; the run is killed at the end of the test.
func (d *device) powerOn() *Run {
	d.t.Helper()
	r, err := d.machine.Start(filepath.Join(d.dir, fmt.Sprintf("serial-%d.log", len(d.runs))))
	if err != nil {
		d.t.Fatal(err)
	}
	d.runs = append(d.runs, r)
	d.t.Cleanup(r.Kill)
	return r
}

// expect waits for a console line and logs how long into the run it came.
func (d *device) expect(ctx context.Context, r *Run, pattern string) string {
	d.t.Helper()
	line, err := r.Expect(ctx, pattern)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Logf("%6.1fs  %s", time.Since(r.Started).Seconds(), strings.TrimSpace(line))
	return line
}

// waitStatus waits for a retained status snapshot that satisfies ok.
func (d *device) waitStatus(ctx context.Context, what string, ok func(ota.Status) bool) ota.Status {
	d.t.Helper()
	st, err := d.fleet.WaitStatus(ctx, ok)
	if err != nil {
		d.t.Fatalf("status %s: %v", what, err)
	}
	d.t.Logf("status: %s: state=%s booted=%s last_result=%+v", what, st.State, st.BootedSlot, st.LastResult)
	return st
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
			d.t.Errorf("grubenv %s=%q, want %q (all: %v)", k, env[k], v, env)
		}
	}
}

// report prints the serial consoles and statuses of a failed scenario; with
// E2E_LOGS set it also keeps the log files there.
func (d *device) report() {
	keep := os.Getenv("E2E_LOGS")
	for i, r := range d.runs {
		r.Kill()
		if keep != "" {
			os.MkdirAll(keep, 0o755)
			CopyFile(r.Log.Path(), filepath.Join(keep, fmt.Sprintf("%s-serial-%d.log", strings.ReplaceAll(d.t.Name(), "/", "_"), i)))
		}
		if d.t.Failed() {
			d.t.Logf("serial console of run %d (last 150 lines of %s):\n%s", i, r.Log.Path(), r.Log.Tail(150))
		}
	}
	if d.t.Failed() {
		for _, st := range d.fleet.Statuses() {
			d.t.Logf("status seq=%d state=%s booted=%s target=%+v last=%+v", st.Seq, st.State, st.BootedSlot, st.Target, st.LastResult)
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
	scenarios := []struct {
		name string
		run  func(t *testing.T, ctx context.Context, d *device)
	}{
		{"0_boot", scenarioBoot},
		{"1_good_update", scenarioGoodUpdate},
		{"2_hang_rolls_back", scenarioHang},
		{"3_health_check_fails", scenarioHealthFails},
		{"4_power_cut_mid_write", scenarioPowerCut},
		{"5_offer_storm", scenarioStorm},
	}
	suiteStart := time.Now()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), scenarioBudget)
			defer cancel()
			start := time.Now()
			d := s.newDevice(t, ctx)
			built := time.Since(start)
			sc.run(t, ctx, d)
			t.Logf("wall time %s (images %s)", time.Since(start).Round(100*time.Millisecond), built.Round(100*time.Millisecond))
		})
	}
	t.Logf("suite wall time %s", time.Since(suiteStart).Round(time.Second))
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
	r := d.powerOn()
	d.expect(ctx, r, otadRunning("A"))
	img, url := d.payload(ctx, "B-2", Healthy, d.cfg)
	d.offer(ctx, "rel-b-2", img, url, time.Now())
	d.expect(ctx, r, `offer accepted.*id=rel-b-2`)
	d.expect(ctx, r, regexp.QuoteMeta(MarkerReboot))
	d.expect(ctx, r, bootingSlot("B"))
	d.expect(ctx, r, initOf("B-2", "B"))
	d.expect(ctx, r, otadRunning("B"))
	st := d.waitStatus(ctx, "committed on B", func(s ota.Status) bool {
		return s.BootedSlot == "B" && s.State == ota.Idle && s.LastResult != nil && s.LastResult.Result == ota.ResultSuccess
	})
	if st.Slots["B"].SHA256 != img.SHA256 || st.LastResult.ID != "rel-b-2" {
		t.Errorf("status after commit: slot B %+v, last result %+v; want sha256 %s, id rel-b-2", st.Slots["B"], st.LastResult, img.SHA256)
	}
	d.expect(ctx, r, `mark=good slot=B`)
	r.Kill()
	d.wantEnv(d.grubenv(ctx), map[string]string{"ORDER": "B A", "B_OK": "1", "B_TRY": "0", "A_OK": "1"})
}

func scenarioHang(t *testing.T, ctx context.Context, d *device) {
	r := d.powerOn()
	d.expect(ctx, r, otadRunning("A"))
	img, url := d.payload(ctx, "B-hang", Hang, d.cfg)
	d.offer(ctx, "rel-b-hang", img, url, time.Now())
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
	d.wantEnv(d.grubenv(ctx), map[string]string{"A_OK": "1", "A_TRY": "0", "B_OK": "0"})
}

func scenarioHealthFails(t *testing.T, ctx context.Context, d *device) {
	r := d.powerOn()
	d.expect(ctx, r, otadRunning("A"))
	bad := d.cfg
	bad.CommitWindow = "15s" // the health check retries every 5 s within the window
	img, url := d.payload(ctx, "B-unhealthy", Unhealthy, bad)
	d.offer(ctx, "rel-b-unhealthy", img, url, time.Now())
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
	r := d.powerOn()
	d.expect(ctx, r, otadRunning("A"))
	img, url := d.payload(ctx, "B-3", Healthy, d.cfg)
	d.http.Throttle(2 << 20) // ~16 s for the image: time to cut the power mid-write
	d.offer(ctx, "rel-b-3", img, url, time.Now())
	p, err := d.fleet.WaitProgress(ctx, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%6.1fs  power cut at %d/%d bytes", time.Since(r.Started).Seconds(), p.BytesDone, p.BytesTotal)
	r.Kill()
	// Slot B was marked bad before the first byte: GRUB must not boot it.
	d.wantEnv(d.grubenv(ctx), map[string]string{"B_OK": "0", "A_OK": "1"})
	d.http.Throttle(0)
	r = d.powerOn()
	d.expect(ctx, r, bootingSlot("A"))
	d.expect(ctx, r, otadRunning("A"))
	d.expect(ctx, r, bootingSlot("B"))
	d.expect(ctx, r, initOf("B-3", "B"))
	st := d.waitStatus(ctx, "committed on B after the power cut", func(s ota.Status) bool {
		return s.BootedSlot == "B" && s.State == ota.Idle && s.LastResult != nil && s.LastResult.Result == ota.ResultSuccess
	})
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
	r := d.powerOn()
	d.expect(ctx, r, otadRunning("A"))
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
	st := d.waitStatus(ctx, "newest offer committed", func(s ota.Status) bool {
		return s.BootedSlot == "B" && s.State == ota.Idle && s.LastResult != nil && s.LastResult.Result == ota.ResultSuccess
	})
	if st.Slots["B"].SHA256 != imgs[2].SHA256 || st.LastResult.ID != "rel-s3" {
		t.Errorf("after the storm: slot B %+v, last %+v; want rel-s3 %s", st.Slots["B"], st.LastResult, imgs[2].SHA256)
	}
	d.expect(ctx, r, `mark=good slot=B`)
	r.Kill()
	d.wantEnv(d.grubenv(ctx), map[string]string{"ORDER": "B A", "B_OK": "1", "B_TRY": "0"})
}
