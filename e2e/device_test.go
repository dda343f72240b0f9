//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
)

// kit is what building a slot image for one platform needs: the otad binary
// for its architecture, busybox, the kernel and its modules, the signing key.
type kit struct {
	platform Platform
	kernel   Kernel
	otad     []byte
	busybox  []byte
	modules  map[string][]byte
	signer   *Signer
	slotMiB  int // size of a slot filesystem, which is also the update payload
}

// newKit builds otad for the platform (static, CGO_ENABLED=0) and reads busybox
// and the kernel modules the platform's init loads.
func newKit(t *testing.T, ctx context.Context, p Platform, k Kernel, busybox string, slotMiB int) *kit {
	t.Helper()
	kt := &kit{platform: p, kernel: k, slotMiB: slotMiB}
	bin := filepath.Join(t.TempDir(), "otad-"+p.GOARCH)
	build := exec.CommandContext(ctx, runtimeGo(), "build", "-trimpath", "-ldflags", "-s -w -X main.version=e2e", "-o", bin, "./cmd/otad")
	build.Dir = repoRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+p.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build otad for %s: %v\n%s", p.GOARCH, err, out)
	}
	var err error
	if kt.otad, err = os.ReadFile(bin); err != nil {
		t.Fatal(err)
	}
	if kt.busybox, err = os.ReadFile(busybox); err != nil {
		t.Fatal(err)
	}
	if kt.modules, err = k.ReadModules(p.AllModules()); err != nil {
		t.Fatal(err)
	}
	if kt.signer, err = NewSigner(); err != nil {
		t.Fatal(err)
	}
	return kt
}

// requireAll skips (or under CI fails) a suite whose host tools are missing.
func requireAll(t *testing.T, missing []string) {
	t.Helper()
	if len(missing) == 0 {
		return
	}
	msg := "e2e needs: " + strings.Join(missing, ", ")
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
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

// booter starts one QEMU run of a machine.
type booter interface {
	Start(logPath string) (*Run, error)
}

// device is one scenario's emulated device with its broker and HTTP server.
type device struct {
	t       *testing.T
	kit     *kit
	dir     string
	broker  *mosquittotest.Broker
	http    *PayloadServer
	fleet   *Fleet
	disk    *Disk
	machine booter
	runs    []*Run
	cfg     GuestConfig
	// envChunkKB goes into every userland of the device (Userland.EnvChunkKB).
	envChunkKB int
}

// newNetDevice starts what surrounds a device: a mosquitto broker, the HTTP
// server for payloads and a watcher of the device's topics. The caller builds
// the disk and sets machine.
func newNetDevice(t *testing.T, k *kit) *device {
	t.Helper()
	d := &device{t: t, kit: k, dir: t.TempDir()}
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
	t.Cleanup(d.report)
	return d
}

func (d *device) userland(version string, b Behaviour, cfg GuestConfig) Userland {
	k := d.kit
	return Userland{
		Platform: k.platform, Version: version, Behaviour: b, Config: cfg, PublicKeyPEM: k.signer.PublicKeyPEM,
		OtadBinary: k.otad, Busybox: k.busybox, Modules: k.modules, EnvChunkKB: d.envChunkKB,
	}
}

// slotImage builds a slot filesystem holding a userland.
func (d *device) slotImage(ctx context.Context, version string, b Behaviour, cfg GuestConfig, out string) {
	d.t.Helper()
	if err := BuildSlotImage(ctx, d.dir, d.kit.kernel, d.userland(version, b, cfg), out, d.kit.slotMiB); err != nil {
		d.t.Fatal(err)
	}
}

// factoryDisk builds the device's disk: boot (the ESP or U-Boot's boot
// partition image) in partition 1, slots A and B both holding the healthy
// "A-1", an empty ext4 data partition for otad's journal.
func (d *device) factoryDisk(ctx context.Context, l Layout, boot string) {
	d.t.Helper()
	slotA := filepath.Join(d.dir, "slotA.ext4")
	d.slotImage(ctx, "A-1", Healthy, d.cfg, slotA)
	data := filepath.Join(d.dir, "data.ext4")
	if _, err := run(ctx, "mkfs.ext4", "-q", "-F", "-L", "data", data, fmt.Sprintf("%dM", l.Data)); err != nil {
		d.t.Fatal(err)
	}
	var err error
	d.disk, err = BuildDisk(ctx, filepath.Join(d.dir, "disk.img"), l, map[int]string{
		PartESP: boot, PartSlotA: slotA, PartSlotB: slotA, PartData: data,
	})
	if err != nil {
		d.t.Fatal(err)
	}
}

// payload builds a slot image for the update and puts it on the HTTP server.
func (d *device) payload(ctx context.Context, version string, b Behaviour, cfg GuestConfig) (Image, string) {
	d.t.Helper()
	name := "rootfs-" + version + ".ext4"
	path := filepath.Join(d.http.Dir, name)
	d.slotImage(ctx, version, b, cfg, path)
	img, err := HashImage(path)
	if err != nil {
		d.t.Fatal(err)
	}
	return img, d.http.URL(name)
}

// offer signs and publishes an offer for img on the device's desired topic.
func (d *device) offer(ctx context.Context, id string, img Image, url string, issued time.Time) {
	d.t.Helper()
	env, err := d.kit.signer.Offer(id, id, img, url, issued)
	if err != nil {
		d.t.Fatal(err)
	}
	if err := d.fleet.Publish(ctx, env); err != nil {
		d.t.Fatal(err)
	}
}

// powerOnA powers the device on and waits until otad runs on slot A.
func (d *device) powerOnA(ctx context.Context) *Run {
	d.t.Helper()
	r := d.powerOn()
	d.expect(ctx, r, otadRunning("A"))
	return r
}

// offerImage builds image version (behaving as b, with cfg), serves it and
// offers it as rel-<version> issued at issued.
func (d *device) offerImage(ctx context.Context, version string, b Behaviour, cfg GuestConfig, issued time.Time) Image {
	d.t.Helper()
	img, url := d.payload(ctx, version, b, cfg)
	d.offer(ctx, "rel-"+strings.ToLower(version), img, url, issued)
	return img
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
	d.t.Logf("run %d %6.1fs  %s", d.runIndex(r), time.Since(r.Started).Seconds(), strings.TrimSpace(line))
	return line
}

func (d *device) runIndex(r *Run) int {
	for i, x := range d.runs {
		if x == r {
			return i
		}
	}
	return -1
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

// expectCommitted expects image version, offered as id, to start on slot B
// and commit: its init and otad run, the status settles with img in B, and
// otad marks B good.
func (d *device) expectCommitted(ctx context.Context, r *Run, version, id string, img Image) {
	d.t.Helper()
	d.expect(ctx, r, initOf(version, "B"))
	d.expect(ctx, r, otadRunning("B"))
	st := d.waitStatus(ctx, "committed on B", settled("B", ota.ResultSuccess))
	if st.Slots["B"].SHA256 != img.SHA256 || st.LastResult.ID != id {
		d.t.Errorf("status after commit: slot B %+v, last result %+v; want sha256 %s, id %s", st.Slots["B"], st.LastResult, img.SHA256, id)
	}
	d.expect(ctx, r, `mark=good slot=B`)
}

// settled is a status predicate: idle on slot, the last offer ended with result.
func settled(slot ota.Slot, result ota.Result) func(ota.Status) bool {
	return func(s ota.Status) bool {
		return s.BootedSlot == slot && s.State == ota.Idle && s.LastResult != nil && s.LastResult.Result == result
	}
}

// scenario is one named e2e scenario.
type scenario struct {
	name string
	run  func(t *testing.T, ctx context.Context)
}

// runScenarios runs each scenario as a subtest bounded by budget and logs the
// wall time of each and of all.
func runScenarios(t *testing.T, budget time.Duration, scenarios []scenario) {
	t.Helper()
	suiteStart := time.Now()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			start := time.Now()
			sc.run(t, ctx)
			t.Logf("wall time %s", time.Since(start).Round(100*time.Millisecond))
		})
	}
	t.Logf("suite wall time %s", time.Since(suiteStart).Round(time.Second))
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
