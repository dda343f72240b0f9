package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

type cpioEntry struct {
	mode       uint32
	data       []byte
	rmaj, rmin uint32
}

// readNewc is an independent reader of the newc format, to check the writer.
func readNewc(t *testing.T, b []byte) (map[string]cpioEntry, []string) {
	t.Helper()
	out := map[string]cpioEntry{}
	var order []string
	off := 0
	align := func() { off = (off + 3) &^ 3 }
	for {
		if off+110 > len(b) {
			t.Fatalf("truncated header at %d", off)
		}
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			t.Fatalf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			if err != nil {
				t.Fatalf("field %d at %d: %v", i, off, err)
			}
			return uint32(v)
		}
		mode, size, rmaj, rmin, namesize := field(1), field(6), field(9), field(10), field(11)
		off += 110
		name := string(b[off : off+int(namesize)-1])
		if b[off+int(namesize)-1] != 0 {
			t.Fatalf("name %q not NUL-terminated", name)
		}
		off += int(namesize)
		align()
		data := b[off : off+int(size)]
		off += int(size)
		align()
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out, order
		}
		out[name] = cpioEntry{mode: mode, data: data, rmaj: rmaj, rmin: rmin}
		order = append(order, name)
	}
}

func TestArchiveNewc(t *testing.T) {
	a := NewArchive()
	a.File("/init", []byte("#!/bin/sh\n"), 0o755)
	a.File("usr/bin/otad", []byte("abcde"), 0o755) // odd size: data must be padded
	a.Symlink("/bin/sh", "busybox")
	a.CharDev("dev/console", 5, 1)
	a.Dir("proc")
	var buf bytes.Buffer
	n, err := a.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) || n%4 != 0 {
		t.Fatalf("WriteTo reported %d bytes, wrote %d (must be 4-aligned)", n, buf.Len())
	}
	got, order := readNewc(t, buf.Bytes())
	tests := []struct {
		name       string
		mode       uint32
		data       string
		rmaj, rmin uint32
	}{
		{"init", 0o100755, "#!/bin/sh\n", 0, 0},
		{"usr", 0o040755, "", 0, 0},
		{"usr/bin", 0o040755, "", 0, 0},
		{"usr/bin/otad", 0o100755, "abcde", 0, 0},
		{"bin", 0o040755, "", 0, 0},
		{"bin/sh", 0o120777, "busybox", 0, 0},
		{"dev", 0o040755, "", 0, 0},
		{"dev/console", 0o020600, "", 5, 1},
		{"proc", 0o040755, "", 0, 0},
	}
	for _, tc := range tests {
		e, ok := got[tc.name]
		if !ok {
			t.Errorf("%s missing from the archive", tc.name)
			continue
		}
		if e.mode != tc.mode || string(e.data) != tc.data || e.rmaj != tc.rmaj || e.rmin != tc.rmin {
			t.Errorf("%s: mode %o data %q rdev %d:%d; want %o %q %d:%d", tc.name, e.mode, e.data, e.rmaj, e.rmin, tc.mode, tc.data, tc.rmaj, tc.rmin)
		}
	}
	if len(got) != len(tests) {
		t.Errorf("archive has %d entries %v, want %d", len(got), order, len(tests))
	}
	// Parents must come before children, or the kernel cannot create them.
	pos := map[string]int{}
	for i, n := range order {
		pos[n] = i
	}
	for _, n := range order {
		if d := filepath.Dir(n); d != "." && pos[d] > pos[n] {
			t.Errorf("%s comes before its parent %s", n, d)
		}
	}
}

func TestArchiveListsWithCpio(t *testing.T) {
	testtool.Require(t, "cpio", "cpio")
	a := NewArchive()
	a.File("etc/otad/otad.toml", []byte("x = 1\n"), 0o644)
	a.Symlink("bin/sh", "busybox")
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cpio", "-t", "--quiet")
	cmd.Stdin = &buf
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -t: %v", err)
	}
	want := "bin\nbin/sh\netc\netc/otad\netc/otad/otad.toml\n"
	if string(out) != want {
		t.Errorf("cpio -t lists %q, want %q", out, want)
	}
}

func TestGuestConfigParses(t *testing.T) {
	tests := []struct {
		name       string
		cfg        GuestConfig
		wantBroker string
		wantHealth []string
		wantWindow time.Duration
	}{
		{"mqtt and health", GuestConfig{BrokerPort: 1883, CommitWindow: "20s", HealthCommand: true},
			"mqtt://10.0.2.2:1883", []string{"/usr/libexec/otad/health-check"}, 20 * time.Second},
		{"local only, defaults", GuestConfig{}, "", nil, 60 * time.Second},
		{"uboot", GuestConfig{BrokerPort: 1883, HealthCommand: true, Bootloader: "uboot"},
			"mqtt://10.0.2.2:1883", []string{"/usr/libexec/otad/health-check"}, 60 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tc.cfg.TOML()), "otad.toml", "")
			if err != nil {
				t.Fatalf("otad rejects the guest config: %v\n%s", err, tc.cfg.TOML())
			}
			if c.MQTT.Broker != tc.wantBroker || c.Commit.Window.Duration != tc.wantWindow ||
				strings.Join(c.Commit.HealthCommand, " ") != strings.Join(tc.wantHealth, " ") {
				t.Errorf("broker %q window %s health %v; want %q %s %v", c.MQTT.Broker, c.Commit.Window, c.Commit.HealthCommand, tc.wantBroker, tc.wantWindow, tc.wantHealth)
			}
			if c.Slots.A != "/dev/vda2" || c.Slots.B != "/dev/vda3" {
				t.Errorf("slots %+v: not the guest's disk layout", c.Slots)
			}
			switch tc.cfg.Bootloader {
			case "uboot":
				if c.Bootloader.Type != "uboot" || c.Bootloader.EnvConfig != "/etc/fw_env.config" || c.Bootloader.Attempts != UBootAttempts {
					t.Errorf("bootloader %+v: not the U-Boot guest's", c.Bootloader)
				}
			default:
				if c.Bootloader.Type != "grub" || c.Bootloader.EnvFile != GuestGrubenv {
					t.Errorf("bootloader %+v: not the GRUB guest's", c.Bootloader)
				}
			}
			if c.DeviceID != GuestDeviceID || c.Compatible != GuestCompatible || strings.Join(c.Download.Schemes, ",") != "http" {
				t.Errorf("device %q compatible %q schemes %v", c.DeviceID, c.Compatible, c.Download.Schemes)
			}
		})
	}
}

func testUserland(p Platform, b Behaviour) Userland {
	mods := map[string][]byte{}
	for _, m := range p.AllModules() {
		mods[m] = []byte("ko:" + m)
	}
	cfg := GuestConfig{HealthCommand: true}
	if p.EnvDevice != "" {
		cfg.Bootloader = "uboot"
	}
	return Userland{Platform: p, Version: "T-1", Behaviour: b, OtadBinary: []byte("otad"), Busybox: []byte("busybox"), Modules: mods,
		PublicKeyPEM: []byte("pem"), Config: cfg}
}

func TestInitScript(t *testing.T) {
	tests := []struct {
		p       Platform
		b       Behaviour
		hangs   bool
		panics  bool
		health0 bool
	}{
		{X86GRUB(), Healthy, false, false, true},
		{X86GRUB(), Hang, true, false, true},
		{X86GRUB(), Unhealthy, false, false, false},
		{Arm64UBoot(), Healthy, false, false, true},
		{Arm64UBoot(), Hang, true, false, true},
		{Arm64UBoot(), Panic, false, true, true},
	}
	for _, tc := range tests {
		name := fmt.Sprintf("%s/behaviour %d", tc.p.Name, tc.b)
		u := testUserland(tc.p, tc.b)
		script, err := u.InitScript()
		if err != nil {
			t.Fatal(err)
		}
		// The script must at least parse with a POSIX shell.
		sh := exec.Command("/bin/sh", "-n")
		sh.Stdin = strings.NewReader(script)
		if out, err := sh.CombinedOutput(); err != nil {
			t.Errorf("%s: sh -n: %v: %s", name, err, out)
		}
		if got := strings.Contains(script, "echo 1 > /dev/watchdog"); got != tc.hangs {
			t.Errorf("%s: stops feeding the watchdog = %v, want %v", name, got, tc.hangs)
		}
		if got := strings.Contains(script, "\nexit 1\n"); got != tc.panics {
			t.Errorf("%s: init exits = %v, want %v", name, got, tc.panics)
		}
		if !strings.Contains(script, "i6300esb.ko heartbeat=5") || !strings.Contains(script, "for m in "+strings.Join(tc.p.Modules, " ")+";") {
			t.Errorf("%s: modules or watchdog heartbeat missing:\n%s", name, script)
		}
		if got := strings.Contains(script, "mount -t vfat"); got != tc.p.MountESP {
			t.Errorf("%s: mounts the ESP = %v, want %v", name, got, tc.p.MountESP)
		}
		if tc.p.EnvDevice != "" && !strings.Contains(script, "[ ! -b "+tc.p.EnvDevice+" ]") {
			t.Errorf("%s: does not wait for the env device %s", name, tc.p.EnvDevice)
		}
		if got := strings.Contains(u.healthScript(), "exit 0"); got != tc.health0 {
			t.Errorf("%s: health check passes = %v, want %v", name, got, tc.health0)
		}
	}
	u := testUserland(Arm64UBoot(), Healthy)
	u.EnvChunkKB = 4
	script, err := u.InitScript()
	if err != nil || !strings.Contains(script, "echo 4 > /sys/block/vdb/queue/max_sectors_kb") {
		t.Errorf("EnvChunkKB=4: %v\n%s", err, script)
	}
}

func TestUserlandArchive(t *testing.T) {
	for _, p := range []Platform{X86GRUB(), Arm64UBoot()} {
		t.Run(p.Name, func(t *testing.T) { testUserlandArchive(t, p) })
	}
}

func testUserlandArchive(t *testing.T, p Platform) {
	u := testUserland(p, Healthy)
	a, err := u.Archive()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	got, _ := readNewc(t, buf.Bytes())
	want := map[string]string{
		"etc/otad-image-version":        "T-1\n",
		"usr/bin/otad":                  "otad",
		"etc/otad/keys.d/e2e.pub":       "pem",
		"lib/modules/i6300esb.ko":       "ko:i6300esb",
		"etc/otad/otad.toml":            u.Config.TOML(),
		"lib/modules/virtio_blk.ko":     "ko:virtio_blk",
		"usr/libexec/otad/health-check": u.healthScript(),
	}
	if p.EnvDevice != "" {
		want["etc/fw_env.config"] = "/dev/vdb 0x0 0x40000 0x40000\n"
	} else if _, ok := got["etc/fw_env.config"]; ok {
		t.Error("fw_env.config in a GRUB userland")
	}
	for name, w := range want {
		if string(got[name].data) != w {
			t.Errorf("%s = %q, want %q", name, got[name].data, w)
		}
	}
	if e := got["usr/bin/systemctl"]; e.mode&0o111 == 0 || !strings.Contains(string(e.data), "reboot -f") {
		t.Errorf("systemctl shim %o %q: not an executable that reboots", e.mode, e.data)
	}
	if e := got["dev/console"]; e.mode != modeChar|0o600 || e.rmaj != 5 || e.rmin != 1 {
		t.Errorf("dev/console %+v", e)
	}

	delete(u.Modules, "ext4")
	if _, err := u.Archive(); err == nil || !strings.Contains(err.Error(), "ext4") {
		t.Errorf("missing module: err %v, want one naming ext4", err)
	}
	u.Version = ""
	if _, err := u.Archive(); err == nil {
		t.Error("userland without a version: no error")
	}
}

func TestSerialLogExpect(t *testing.T) {
	l, err := NewSerialLog(filepath.Join(t.TempDir(), "serial.log"), regexp.MustCompile(`Kernel panic`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		// Fragments, CRLF and a colour escape, as OVMF and GRUB print them.
		for _, s := range []string{"\x1b[0mBdsDxe: loading\r\n", "otad: boot", "ing slot A\r\nE2E: init ver", "sion=A-1 slot=A\n", "second A\n"} {
			l.Write([]byte(s))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	steps := []struct{ pattern, want string }{
		{`^BdsDxe`, "BdsDxe: loading"},
		{`booting slot A`, "otad: booting slot A"},
		{`slot=A`, "E2E: init version=A-1 slot=A"},
		{`A$`, "second A"}, // later lines only: "booting slot A" was consumed
	}
	for _, s := range steps {
		got, err := l.Expect(ctx, regexp.MustCompile(s.pattern))
		if err != nil || got != s.want {
			t.Fatalf("Expect(%q) = %q, %v; want %q", s.pattern, got, err, s.want)
		}
	}
	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := l.Expect(short, regexp.MustCompile(`never`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Expect with no such line: %v, want deadline exceeded", err)
	}
	l.Write([]byte("[ 1.0] Kernel panic - not syncing\nlater\n"))
	if _, err := l.Expect(ctx, regexp.MustCompile(`later`)); !errors.Is(err, ErrFatalLine) {
		t.Errorf("Expect past a panic: %v, want ErrFatalLine", err)
	}
	l.Write([]byte("tail without newline"))
	l.Close()
	if got, err := l.Expect(ctx, regexp.MustCompile(`tail`)); err != nil || got != "tail without newline" {
		t.Errorf("Expect of the last partial line after Close: %q, %v", got, err)
	}
	if _, err := l.Expect(ctx, regexp.MustCompile(`more`)); !errors.Is(err, ErrConsoleClosed) {
		t.Errorf("Expect after Close: %v, want ErrConsoleClosed", err)
	}
	file, err := os.ReadFile(l.Path())
	if err != nil || !bytes.Contains(file, []byte("\x1b[0mBdsDxe")) {
		t.Errorf("the log file keeps the raw console: %q, %v", file, err)
	}
}

func TestParseSfdisk(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		want    map[int]Partition
		wantErr bool
	}{
		{"gpt", `{"partitiontable":{"label":"gpt","sectorsize":512,"partitions":[
			{"node":"/tmp/disk.img1","start":2048,"size":65536},
			{"node":"/tmp/disk.img2","start":67584,"size":98304}]}}`,
			map[int]Partition{1: {1 << 20, 32 << 20}, 2: {67584 * 512, 48 << 20}}, false},
		{"4k sectors, digits in the path", `{"partitiontable":{"sectorsize":4096,"partitions":[
			{"node":"/tmp/d1/disk10.img12","start":256,"size":10}]}}`,
			map[int]Partition{12: {1 << 20, 40960}}, false},
		{"no partitions", `{"partitiontable":{"partitions":[]}}`, nil, true},
		{"node without a number", `{"partitiontable":{"partitions":[{"node":"disk","start":1,"size":1}]}}`, nil, true},
		{"not json", `sfdisk: cannot open`, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSfdisk([]byte(tc.json), "disk.img")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzParseSfdisk(f *testing.F) {
	f.Add([]byte(`{"partitiontable":{"sectorsize":512,"partitions":[{"node":"d1","start":2048,"size":8}]}}`))
	f.Add([]byte(`{"partitiontable":{"partitions":[{"node":"","start":-1,"size":0}]}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		parts, err := parseSfdisk(b, "disk.img")
		if err != nil {
			return
		}
		for n, p := range parts {
			if p.Start <= 0 || p.Size <= 0 {
				t.Fatalf("partition %d accepted with start %d size %d", n, p.Start, p.Size)
			}
		}
	})
}

func TestParseEnvList(t *testing.T) {
	got := parseEnvList([]byte("ORDER=B A\nA_OK=1\nweird\n=x\nB_TRY=0\n\n"))
	want := map[string]string{"ORDER": "B A", "A_OK": "1", "B_TRY": "0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestDiskRoundTrip builds a small disk the way the scenarios do and reads
// the grubenv back from the image with mtools.
func TestDiskRoundTrip(t *testing.T) {
	for _, tool := range []Tool{{"grub-editenv", "grub-common"}, {"mkfs.vfat", "dosfstools"}, {"mcopy", "mtools"},
		{"sgdisk", "gdisk"}, {"sfdisk", "fdisk"}, {"mkfs.ext4", "e2fsprogs"}} {
		testtool.Require(t, tool.Name, tool.Package)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	env := filepath.Join(dir, "grubenv")
	vars := map[string]string{"ORDER": "A B", "A_OK": "1", "A_TRY": "0", "B_OK": "1", "B_TRY": "0"}
	if err := BuildGrubenv(ctx, env, vars); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(env); err != nil || st.Size() != 1024 {
		t.Fatalf("grubenv: %v, %v; want 1024 bytes", st, err)
	}
	efi, cfg := filepath.Join(dir, "BOOTX64.EFI"), filepath.Join(dir, "grub.cfg")
	os.WriteFile(efi, []byte("MZ not really"), 0o644)
	os.WriteFile(cfg, []byte("echo hi\n"), 0o644)
	l := Layout{ESP: 8, Slot: 4, Data: 2}
	esp := filepath.Join(dir, "esp.img")
	if err := BuildESP(ctx, esp, l.ESP, ESPFiles{GrubEFI: efi, GrubCfg: cfg, Grubenv: env}); err != nil {
		t.Fatal(err)
	}
	slot := filepath.Join(dir, "slot.img")
	os.WriteFile(slot, bytes.Repeat([]byte("A"), 4096), 0o644)
	d, err := BuildDisk(ctx, filepath.Join(dir, "disk.img"), l, map[int]string{PartESP: esp, PartSlotA: slot})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]Partition{1: {1 << 20, 8 << 20}, 2: {9 << 20, 4 << 20}, 3: {13 << 20, 4 << 20}, 4: {17 << 20, 2 << 20}}
	if fmt.Sprint(d.Parts) != fmt.Sprint(want) {
		t.Errorf("partitions %v, want %v", d.Parts, want)
	}
	got, err := d.ReadGrubenv(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(vars) {
		t.Errorf("grubenv read back %v, want %v", got, vars)
	}
	raw, _ := os.ReadFile(d.Path)
	if !bytes.Equal(raw[9<<20:9<<20+4096], bytes.Repeat([]byte("A"), 4096)) {
		t.Error("slot A image not at partition 2's start")
	}
	big := filepath.Join(dir, "big.img")
	os.WriteFile(big, make([]byte, 5<<20), 0o644)
	if err := d.WritePartition(PartSlotB, big); err == nil || !strings.Contains(err.Error(), "does not fit partition 3") {
		t.Errorf("oversized image: %v, want a 'does not fit' error", err)
	}
}

func TestPayloadServer(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789"), 10_000) // 100 kB
	os.WriteFile(filepath.Join(dir, "img"), data, 0o644)
	s, err := StartPayloadServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if want := fmt.Sprintf("http://10.0.2.2:%d/img", s.Port); s.URL("img") != want {
		t.Errorf("URL %q, want %q", s.URL("img"), want)
	}
	local := fmt.Sprintf("http://127.0.0.1:%d/img", s.Port)
	tests := []struct {
		name     string
		rng      string
		rate     int64
		status   int
		body     []byte
		minTime  time.Duration
		notFound bool
	}{
		{"whole", "", 0, http.StatusOK, data, 0, false},
		{"resume with Range", "bytes=99990-", 0, http.StatusPartialContent, data[99990:], 0, false},
		{"throttled", "bytes=0-39999", 100_000, http.StatusPartialContent, data[:40000], 300 * time.Millisecond, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s.Throttle(tc.rate)
			req, _ := http.NewRequest(http.MethodGet, local, nil)
			if tc.rng != "" {
				req.Header.Set("Range", tc.rng)
			}
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != tc.status || !bytes.Equal(body, tc.body) {
				t.Errorf("status %d, %d bytes, err %v; want %d, %d bytes", resp.StatusCode, len(body), err, tc.status, len(tc.body))
			}
			if el := time.Since(start); el < tc.minTime {
				t.Errorf("took %s, want at least %s at %d B/s", el, tc.minTime, tc.rate)
			}
		})
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/missing", s.Port))
	if err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("missing file: %v %v, want 404", resp, err)
	}
	if s.Requests() != int64(len(tests))+1 {
		t.Errorf("Requests() = %d, want %d", s.Requests(), len(tests)+1)
	}
}

func TestSignerOfferVerifies(t *testing.T) {
	s, err := NewSigner()
	if err != nil {
		t.Fatal(err)
	}
	keys := t.TempDir()
	os.WriteFile(filepath.Join(keys, "e2e.pub"), s.PublicKeyPEM, 0o644)
	kr, bad, err := verify.LoadKeyDir(keys)
	if err != nil || len(bad) > 0 {
		t.Fatalf("the guest's trust directory: %v %v", err, bad)
	}
	img := Image{Size: 32 << 20, SHA256: strings.Repeat("ab", 32)}
	now := time.Now()
	env, err := s.Offer("rel-1", "1.0", img, "http://10.0.2.2:8080/rootfs.ext4", now)
	if err != nil {
		t.Fatal(err)
	}
	policy := verify.Policy{DeviceID: GuestDeviceID, Compatible: GuestCompatible, Schemes: []string{"http"}}
	off, err := verify.Check(env, kr, policy, verify.Facts{Now: now, InactiveSlotSize: 48 << 20})
	if err != nil {
		t.Fatalf("the guest would refuse the offer: %v", err)
	}
	if p := off.Manifest.Payload; p.Size != img.Size || p.SHA256 != img.SHA256 || off.Manifest.ID != "rel-1" {
		t.Errorf("manifest %+v", off.Manifest)
	}
	if _, err := verify.Check(env, kr, policy, verify.Facts{Now: now, InactiveSlotSize: 16 << 20}); ota.CodeOf(err) != ota.CodeTooBigForSlot {
		t.Errorf("payload larger than the slot: %v, want too_big_for_slot", err)
	}
}
