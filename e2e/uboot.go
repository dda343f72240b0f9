package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The real U-Boot machine (docs/e2e.md, "The arm64 U-Boot machine"): QEMU's arm64
// `virt` board running Debian's qemu_arm64 U-Boot from the first pflash, its
// environment at offset 0 of the second pflash (one copy of 0x40000 bytes),
// and a virtio disk whose first partition holds boot.scr.
const (
	// UBootBinary is Debian's u-boot-qemu build for QEMU's arm64 virt board.
	UBootBinary = "/usr/lib/u-boot/qemu_arm64/u-boot.bin"
	// FlashSize is the size of each pflash image QEMU's virt board expects.
	FlashSize = 64 << 20
	// EnvOffset and EnvSize place the environment in the second pflash
	// (CONFIG_ENV_ADDR 0x4000000 is its offset 0; size and sector 0x40000).
	EnvOffset = 0
	EnvSize   = 0x40000
)

// MinUBootQEMU is the first QEMU whose pflash lets U-Boot's saveenv work
// ("hw/pflash: fix block write start", QEMU issue #2343): Debian 12's 7.2
// fails with "Flash buffer write timeout"; bookworm-backports has 10.0.
var MinUBootQEMU = [3]int{9, 0, 1}

// UBootTools lists the host programs the U-Boot suite needs beyond Tools().
func UBootTools() []Tool {
	return []Tool{
		{"qemu-system-aarch64", "qemu-system-arm/bookworm-backports"},
		{"mkimage", "u-boot-tools"},
		{"fw_printenv", "libubootenv-tool"},
	}
}

// Arm64Dir is where scripts/e2e-arm64-deps unpacks Debian's arm64 kernel and
// busybox: $OTAD_E2E_ARM64, else the user's cache directory.
func Arm64Dir() string {
	if d := os.Getenv("OTAD_E2E_ARM64"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "otad-e2e", "arm64")
	}
	return filepath.Join(os.TempDir(), "otad-e2e", "arm64")
}

// Arm64 is the guest side of the U-Boot machine, from Debian's arm64 packages.
type Arm64 struct {
	Kernel  Kernel // root/boot/vmlinuz-*-arm64 (an uncompressed Image) and its modules
	Busybox string // root/bin/busybox from busybox-static
}

// FindArm64 reads what scripts/e2e-arm64-deps unpacked into dir/root.
func FindArm64(dir string) (Arm64, error) {
	root := filepath.Join(dir, "root")
	k, err := findKernelIn(root)
	if err != nil {
		return Arm64{}, fmt.Errorf("arm64 kernel (run scripts/e2e-arm64-deps): %w", err)
	}
	bb := filepath.Join(root, "bin", "busybox")
	if _, err := os.Stat(bb); err != nil {
		return Arm64{}, fmt.Errorf("arm64 busybox (run scripts/e2e-arm64-deps): %w", ErrMissing)
	}
	return Arm64{Kernel: k, Busybox: bb}, nil
}

// MissingUBoot lists what the U-Boot suite needs and does not find.
func MissingUBoot() []string {
	var out []string
	for _, t := range append(Tools(), UBootTools()...) {
		if t.Name == "qemu-system-x86_64" || t.Name == "grub-mkimage" || t.Name == "grub-editenv" {
			continue
		}
		if _, err := lookPath(t.Name); err != nil {
			out = append(out, fmt.Sprintf("%s (apt-get install %s)", t.Name, t.Package))
		}
	}
	if _, err := os.Stat(UBootBinary); err != nil {
		out = append(out, UBootBinary+" (apt-get install u-boot-qemu)")
	}
	if _, err := FindArm64(Arm64Dir()); err != nil {
		out = append(out, "Debian's arm64 kernel and busybox in "+Arm64Dir()+" (scripts/e2e-arm64-deps)")
	}
	if v, err := qemuVersion("qemu-system-aarch64"); err == nil && versionLess(v, MinUBootQEMU) {
		out = append(out, fmt.Sprintf("qemu-system-aarch64 %d.%d.%d is older than %d.%d.%d, whose pflash U-Boot's saveenv needs (apt-get install -t bookworm-backports qemu-system-arm)",
			v[0], v[1], v[2], MinUBootQEMU[0], MinUBootQEMU[1], MinUBootQEMU[2]))
	}
	return out
}

var reQEMUVersion = regexp.MustCompile(`QEMU emulator version (\d+)\.(\d+)\.(\d+)`)

func qemuVersion(binary string) ([3]int, error) {
	out, err := run(context.Background(), binary, "--version")
	if err != nil {
		return [3]int{}, err
	}
	return parseQEMUVersion(out)
}

func parseQEMUVersion(out []byte) ([3]int, error) {
	m := reQEMUVersion.FindSubmatch(out)
	if m == nil {
		return [3]int{}, fmt.Errorf("no version in %q", out)
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(string(m[i+1]))
	}
	return v, nil
}

func versionLess(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// BuildFlash0 writes U-Boot padded to a whole pflash image.
func BuildFlash0(out string) error {
	if err := copyFile(UBootBinary, out); err != nil {
		return err
	}
	return os.Truncate(out, FlashSize)
}

// BlankFlash writes an empty pflash image: no valid environment yet.
func BlankFlash(out string) error {
	os.Remove(out)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := f.Truncate(FlashSize); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// BuildBootScript compiles a U-Boot hush script into the boot.scr that
// U-Boot's distro boot looks for.
func BuildBootScript(ctx context.Context, src, out string) error {
	os.Remove(out)
	_, err := run(ctx, "mkimage", "-A", "arm64", "-T", "script", "-C", "none", "-d", src, out)
	return err
}

// BuildBootFAT makes the FAT boot partition image holding /boot.scr.
func BuildBootFAT(ctx context.Context, out string, sizeMiB int, bootScr string) error {
	os.Remove(out)
	if _, err := run(ctx, "mkfs.vfat", "-n", "BOOT", "-C", out, strconv.Itoa(sizeMiB*1024)); err != nil {
		return err
	}
	_, err := run(ctx, "mcopy", "-i", out, bootScr, "::/boot.scr")
	return err
}

// UBootMachine is one arm64 device: U-Boot in flash0, its environment in
// flash1, the GPT disk. Each Start is one boot attempt: -no-reboot turns the
// guest's reset (reboot, watchdog, panic) into QEMU's exit, so U-Boot's own
// counting is what a scenario sees from run to run.
type UBootMachine struct {
	Flash0 string // BuildFlash0; read only
	Flash1 string // the env flash; also the guest's /dev/vdb
	Disk   string
	// Timeout bounds one QEMU run (timeout -s KILL).
	Timeout time.Duration
	// QMP, when set, is the path of a QMP socket for the run
	// (ThrottleEnvWrites).
	QMP string
}

// envDevice is the QEMU id of the guest's env disk (/dev/vdb).
const envDevice = "envdisk"

// Args is the QEMU command line (docs/e2e.md). The env flash is opened twice, as
// pflash for U-Boot and as a virtio disk for Linux (whose kernel has no driver
// for the flash); locking is off for both because U-Boot and Linux never run
// at the same time, and QEMU rereads the pflash at every start.
func (m UBootMachine) Args() []string {
	args := []string{
		"-M", "virt", "-cpu", "cortex-a57", "-smp", "1", "-m", "512", "-accel", "tcg",
		"-no-reboot", "-nographic", "-serial", "stdio", "-monitor", "none",
		"-drive", "if=pflash,format=raw,index=0,readonly=on,file=" + m.Flash0,
		"-drive", "if=pflash,format=raw,index=1,file.locking=off,file=" + m.Flash1,
		// The disk first: U-Boot calls it virtio 0, Linux /dev/vda.
		"-drive", "if=none,id=d0,format=raw,file=" + m.Disk,
		"-device", "virtio-blk-pci,drive=d0,addr=0x2",
		// No request merging: a throttled env write stays a run of small
		// writes, as on a flash that programs page by page.
		"-drive", "if=none,id=env,format=raw,file.locking=off,file=" + m.Flash1,
		"-device", "virtio-blk-pci,drive=env,id=" + envDevice + ",addr=0x3,request-merging=off",
		"-netdev", "user,id=n0,ipv6=off",
		"-device", "virtio-net-pci,netdev=n0,addr=0x4,romfile=",
		"-device", "i6300esb,addr=0x5", "-action", "watchdog=reset",
	}
	if m.QMP != "" {
		args = append(args, "-qmp", "unix:"+m.QMP+",server=on,wait=off")
	}
	return args
}

// Start boots the machine once with its console going to logPath.
func (m UBootMachine) Start(logPath string) (*Run, error) {
	os.Remove(m.QMP)
	return startQEMU("qemu-system-aarch64", m.Args(), m.Timeout, logPath)
}

// ThrottleEnvWrites limits the running guest's writes to its env disk to
// bytesPerSecond (0: no limit), through QMP's block_set_io_throttle, so a test
// can cut the power in the middle of one env write without slowing the ones
// before it.
func (m UBootMachine) ThrottleEnvWrites(ctx context.Context, bytesPerSecond int) error {
	if m.QMP == "" {
		return errors.New("throttle env writes: the machine has no QMP socket")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", m.QMP)
	if err != nil {
		return fmt.Errorf("qmp: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	dec := json.NewDecoder(conn)
	var greeting map[string]json.RawMessage
	if err := dec.Decode(&greeting); err != nil {
		return fmt.Errorf("qmp greeting: %w", err)
	}
	for _, cmd := range []map[string]any{
		{"execute": "qmp_capabilities"},
		{"execute": "block_set_io_throttle", "arguments": map[string]any{
			// The virtio-blk device behind the PCI proxy holds the drive.
			"id": "/machine/peripheral/" + envDevice + "/virtio-backend", "bps": 0, "bps_rd": 0, "bps_wr": bytesPerSecond, "iops": 0, "iops_rd": 0, "iops_wr": 0}},
	} {
		if err := json.NewEncoder(conn).Encode(cmd); err != nil {
			return fmt.Errorf("qmp %s: %w", cmd["execute"], err)
		}
		if err := qmpReply(dec); err != nil {
			return fmt.Errorf("qmp %s: %w", cmd["execute"], err)
		}
	}
	return nil
}

// qmpReply reads up to the answer to the last command, passing over events.
func qmpReply(dec *json.Decoder) error {
	for {
		var msg struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
		}
		if err := dec.Decode(&msg); err != nil {
			return err
		}
		switch {
		case msg.Error != nil:
			return fmt.Errorf("%s: %s", msg.Error.Class, msg.Error.Desc)
		case msg.Return != nil:
			return nil
		}
	}
}

// ProvisionUBootEnv is the factory step: U-Boot runs once on the blank flash1
// (no disk, no network), the console stops its autoboot, sets vars and runs
// saveenv, which stores U-Boot's whole default environment with them. A blank
// flash has no valid environment, and fw_setenv and otad refuse to write one
// from nothing (docs/e2e.md, the blank-flash trap).
func ProvisionUBootEnv(ctx context.Context, flash0, flash1, logPath string, vars map[string]string) error {
	qemu := []string{
		"-M", "virt", "-cpu", "cortex-a57", "-smp", "1", "-m", "512", "-accel", "tcg",
		"-no-reboot", "-nographic", "-serial", "stdio", "-monitor", "none", "-nic", "none",
		"-drive", "if=pflash,format=raw,index=0,readonly=on,file=" + flash0,
		"-drive", "if=pflash,format=raw,index=1,file=" + flash1,
	}
	r, err := startQEMU("qemu-system-aarch64", qemu, 2*time.Minute, logPath)
	if err != nil {
		return err
	}
	defer r.Kill()
	// Type nothing before U-Boot has set its UART up: input QEMU's pl011
	// refuses then is never read later, so the countdown runs out.
	if _, err := r.Expect(ctx, `^Net:`); err != nil {
		return fmt.Errorf("u-boot console: %w", err)
	}
	// Type at the console until U-Boot answers: the first key stops the
	// autoboot countdown, and a command's output (not its echo) shows the
	// prompt is reading lines.
	ready := make(chan error, 1)
	go func() {
		_, err := r.Expect(ctx, `^PROVISION-READY$`)
		ready <- err
	}()
	for waiting := true; waiting; {
		if err := r.Send("setenv p READY; echo PROVISION-${p}\n"); err != nil {
			return err
		}
		select {
		case err := <-ready:
			if err != nil {
				return fmt.Errorf("u-boot console: %w", err)
			}
			waiting = false
		case <-time.After(500 * time.Millisecond):
		}
	}
	var cmd strings.Builder
	cmd.WriteString("setenv p; ")
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		fmt.Fprintf(&cmd, "setenv %s \"%s\"; ", k, vars[k])
	}
	cmd.WriteString("saveenv && echo PROVISION-SAVED; poweroff\n")
	if err := r.Send(cmd.String()); err != nil {
		return err
	}
	if _, err := r.Expect(ctx, `^PROVISION-SAVED$`); err != nil {
		return fmt.Errorf("u-boot saveenv: %w", err)
	}
	return r.Wait(ctx)
}

// ErrNoEnv means fw_printenv found no valid environment (a blank flash, or a
// copy whose CRC fails after a torn write).
var ErrNoEnv = errors.New("no valid U-Boot environment")

// ReadUBootEnv reads the environment in a flash image with fw_printenv, the
// way an operator reads a board's: an independent reader of what U-Boot's
// saveenv and otad wrote.
func ReadUBootEnv(ctx context.Context, flash1, work string) (map[string]string, error) {
	cfg := filepath.Join(work, "fw_env.host.config")
	line := fmt.Sprintf("%s 0x%x 0x%x 0x%x\n", flash1, EnvOffset, EnvSize, EnvSize)
	if err := os.WriteFile(cfg, []byte(line), 0o644); err != nil {
		return nil, err
	}
	out, err := run(ctx, "fw_printenv", "-c", cfg)
	if err != nil {
		// libubootenv says "Cannot read environment, using default" and fails
		// when no copy has a good CRC.
		if strings.Contains(err.Error(), "Cannot read environment") {
			return nil, fmt.Errorf("%s: %w: %w", flash1, ErrNoEnv, err)
		}
		return nil, err
	}
	return parseEnvList(out), nil
}
