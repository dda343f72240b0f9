package e2e

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"
)

// Guest facts shared by the init script, the otad config and the disk layout.
const (
	GuestDeviceID   = "e2e-qemu"
	GuestCompatible = "otad,e2e-qemu"
	// GuestHostAddr is the host's loopback as QEMU's user network shows it.
	GuestHostAddr = "10.0.2.2"
	// GuestGrubenv is where the guest mounts the ESP's grubenv (partition 1).
	GuestGrubenv = "/boot/efi/EFI/BOOT/grubenv"
)

// Serial-console markers the init script prints; the tests wait for them.
const (
	MarkerInit       = "E2E: init" // "E2E: init version=V slot=S"
	MarkerOtadStart  = "E2E: starting otad"
	MarkerOtadExit   = "E2E: otad exited" // "E2E: otad exited rc=N"
	MarkerReboot     = "E2E: systemctl reboot"
	MarkerHang       = "E2E: hanging"
	MarkerFatal      = "E2E: FATAL"
	MarkerHealthOK   = "E2E: health ok"
	MarkerHealthFail = "E2E: health failing"
	MarkerPanic      = "E2E: panic"
)

// Platform is what differs between the emulated machines a userland runs on.
type Platform struct {
	Name   string
	GOARCH string // of the otad binary
	// Modules are loaded by init in order; Watchdog (a module too) last, with
	// heartbeat=5: a guest that stops feeding /dev/watchdog is reset ~5 s later.
	Modules  []string
	Watchdog string
	// KernelFile is the kernel's name under a slot's /boot: what the boot
	// script loads.
	KernelFile string
	// MountESP mounts partition 1 (the FAT ESP with the grubenv) at /boot/efi.
	MountESP bool
	// EnvDevice is the block device the U-Boot environment is reached through
	// (fw_env.config); "" without one.
	EnvDevice string
}

// X86GRUB is the q35 machine with OVMF and GRUB. Its modules (docs/e2e.md): virtio
// block and net, ext4 for the data partition, vfat for the ESP (nls_ascii is
// the iocharset vfat asks for), and the i6300esb watchdog.
func X86GRUB() Platform {
	return Platform{
		Name: "x86_64-grub", GOARCH: "amd64",
		Modules: []string{
			"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci", "virtio_blk",
			"failover", "net_failover", "virtio_net",
			"crc32c_generic", "crc16", "mbcache", "jbd2", "ext4",
			"fat", "vfat", "nls_cp437", "nls_ascii",
			"watchdog",
		},
		Watchdog: "i6300esb", KernelFile: "vmlinuz", MountESP: true,
	}
}

// Arm64UBoot is the arm64 virt machine with U-Boot. Debian's arm64 kernel has
// virtio itself built in, the watchdog core too; nothing mounts the FAT boot
// partition, and the env flash is the second virtio disk.
func Arm64UBoot() Platform {
	return Platform{
		Name: "arm64-uboot", GOARCH: "arm64",
		Modules: []string{
			"virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci", "virtio_blk",
			"failover", "net_failover", "virtio_net",
			"crc32c_generic", "crc16", "mbcache", "jbd2", "ext4",
		},
		Watchdog: "i6300esb", KernelFile: "Image", EnvDevice: "/dev/vdb",
	}
}

// AllModules is every module the userland carries: Modules, then Watchdog.
func (p Platform) AllModules() []string {
	return append(append([]string(nil), p.Modules...), p.Watchdog)
}

// Behaviour is what a slot's userland does after the kernel starts it.
type Behaviour int

const (
	// Healthy feeds the watchdog, runs otad, and passes its health check.
	Healthy Behaviour = iota
	// Hang arms the watchdog and stops before otad: the watchdog resets the machine.
	Hang
	// Unhealthy runs otad with a health check that always fails.
	Unhealthy
	// Panic ends init before otad: the kernel panics (and with panic=-1 on its
	// command line resets at once).
	Panic
)

// UBootAttempts is otad's `attempts` in the U-Boot guests: the shipped boot
// script's default (3), so a counter reset by the script and one written by
// otad agree.
const UBootAttempts = 3

// GuestFwEnvConfig is the guest's /etc/fw_env.config: the U-Boot env at offset
// 0 of the second pflash, which the guest sees as its second virtio disk
// (docs/e2e.md: size and sector 0x40000, one copy).
const GuestFwEnvConfig = "/dev/vdb 0x0 0x40000 0x40000\n"

// GuestConfig is what goes into the guest's /etc/otad/otad.toml.
type GuestConfig struct {
	BrokerPort    int    // mosquitto on the host's 127.0.0.1, reached as 10.0.2.2; 0: no [mqtt]
	CommitWindow  string // Go duration, e.g. "60s"
	HealthCommand bool   // run /usr/libexec/otad/health-check
	// Bootloader is otad's backend: "grub" (the default; the ESP's grubenv) or
	// "uboot" (the env flash through GuestFwEnvConfig).
	Bootloader string
}

// TOML renders the config (docs/contract/config.md) for the guest's disk layout: slots on
// vda2/vda3, the journal on vda4, the boot variables in the ESP's grubenv or
// the U-Boot env flash.
func (c GuestConfig) TOML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device_id = %q\ncompatible = %q\nstate_dir = \"/var/lib/otad\"\ncontrol_socket = \"/run/otad/otad.sock\"\n\n", GuestDeviceID, GuestCompatible)
	if c.BrokerPort != 0 {
		fmt.Fprintf(&b, "[mqtt]\nbroker = \"mqtt://%s:%d\"\n\n", GuestHostAddr, c.BrokerPort)
	}
	b.WriteString("[trust]\nkeys_dir = \"/etc/otad/keys.d\"\n\n")
	b.WriteString("[slots]\nA = \"/dev/vda2\"\nB = \"/dev/vda3\"\ncmdline = \"/proc/cmdline\"\n\n")
	if c.Bootloader == "uboot" {
		fmt.Fprintf(&b, "[bootloader]\ntype = \"uboot\"\nenv_config = \"/etc/fw_env.config\"\nattempts = %d\n\n", UBootAttempts)
	} else {
		fmt.Fprintf(&b, "[bootloader]\ntype = \"grub\"\nenv_file = %q\n\n", GuestGrubenv)
	}
	// Short backoff: the host is one hop away and the suite runs against a clock.
	b.WriteString("[download]\nschemes = [\"http\"]\nretries = 3\nbackoff = \"2s\"\nmax_backoff = \"10s\"\n\n")
	window := c.CommitWindow
	if window == "" {
		window = "60s"
	}
	b.WriteString("[commit]\n")
	if c.HealthCommand {
		b.WriteString("health_command = [\"/usr/libexec/otad/health-check\"]\n")
	}
	fmt.Fprintf(&b, "window = %q\n\n[reboot]\npolicy = \"immediate\"\n", window)
	return b.String()
}

// Userland is the contents of one slot's initramfs: the root filesystem stays
// in RAM, so the slots are never mounted and the inactive one can be written.
type Userland struct {
	Platform     Platform
	Version      string // /etc/otad-image-version, printed by init
	Behaviour    Behaviour
	Config       GuestConfig
	PublicKeyPEM []byte // trusted by otad (keys.d/e2e.pub)
	OtadBinary   []byte // static otad for Platform.GOARCH
	Busybox      []byte // static busybox
	// Modules maps each name of Platform.AllModules() to its .ko bytes.
	Modules map[string][]byte
	// EnvChunkKB > 0 caps the env device's requests at that many KiB
	// (max_sectors_kb), so a throttled env write lands piece by piece and a
	// power cut can tear it the way a cut mid-erase tears a flash sector.
	EnvChunkKB int
}

const initScript = `#!/bin/sh
# otad e2e guest init (PID 1). Anything it cannot set up powers the machine off,
# so a broken image ends the QEMU run instead of looping until the timeout.
/bin/busybox --install -s /bin
export PATH=/usr/bin:/bin
mkdir -p /proc /sys /dev /run /tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
fatal() { echo "{{.Fatal}}: $*"; sync; poweroff -f; sleep 60; }
VERSION=$(cat /etc/otad-image-version)
SLOT=$(sed -n 's/.*otad\.slot=\([AB]\).*/\1/p' /proc/cmdline)
[ -n "$SLOT" ] || SLOT=$(sed -n 's/.*rauc\.slot=\([AB]\).*/\1/p' /proc/cmdline)
echo "{{.Init}} version=$VERSION slot=$SLOT uptime=$(cut -d' ' -f1 /proc/uptime) date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
{{- if .Panic}}
echo "{{.Panic}}: init exits, the kernel panics"
exit 1
{{- end}}
for m in {{.Modules}}; do
  insmod /lib/modules/$m.ko || fatal "insmod $m"
done
# heartbeat=5: a guest that stops feeding /dev/watchdog is reset about 5 s later.
insmod /lib/modules/{{.Watchdog}}.ko heartbeat=5 || fatal "insmod {{.Watchdog}}"
i=0
while [ ! -b /dev/vda4 ] || [ ! -c /dev/watchdog ]{{if .EnvDevice}} || [ ! -b {{.EnvDevice}} ]{{end}}; do
  i=$((i+1)); [ $i -gt 100 ] && fatal "no /dev/vda4{{if .EnvDevice}}, {{.EnvDevice}}{{end}} or /dev/watchdog"
  sleep 0.1
done
{{- if .Hang}}
echo "{{.Hang}}: arming the watchdog and never feeding it"
echo 1 > /dev/watchdog
while :; do sleep 3600; done
{{- end}}
watchdog -T 5 -t 1 /dev/watchdog || fatal "watchdog daemon"
{{- if .EnvChunkKB}}
echo {{.EnvChunkKB}} > /sys/block/{{.EnvDisk}}/queue/max_sectors_kb || fatal "max_sectors_kb of {{.EnvDevice}}"
{{- end}}
mkdir -p /var/lib/otad
{{- if .MountESP}}
mkdir -p /boot/efi
mount -t vfat -o rw /dev/vda1 /boot/efi || fatal "mount ESP /dev/vda1"
{{- end}}
mount -t ext4 /dev/vda4 /var/lib/otad || fatal "mount data /dev/vda4"
ip link set lo up
i=0
while ! ip link set eth0 up 2>/dev/null; do
  i=$((i+1)); [ $i -gt 100 ] && fatal "no eth0"
  sleep 0.1
done
ip addr add 10.0.2.15/24 dev eth0 || fatal "ip addr"
echo "{{.Start}} version=$VERSION slot=$SLOT"
otad run -c /etc/otad/otad.toml
rc=$?
echo "{{.Exit}} rc=$rc"
sync
umount{{if .MountESP}} /boot/efi{{end}} /var/lib/otad
poweroff -f
`

// systemctl stands in for systemd: otad reboots non-sim devices with
// `systemctl reboot` (and captures its output, hence /dev/console).
const systemctlShim = `#!/bin/sh
case "$1" in
reboot)
  echo "` + MarkerReboot + `" > /dev/console
  sync
  reboot -f
  ;;
*)
  echo "systemctl: only 'reboot' exists in the e2e guest" >&2
  exit 1
  ;;
esac
`

// InitScript renders the guest's /init.
func (u Userland) InitScript() (string, error) {
	tmpl, err := template.New("init").Parse(initScript)
	if err != nil {
		return "", fmt.Errorf("init script: %w", err)
	}
	when := func(b Behaviour, marker string) string {
		if u.Behaviour == b {
			return marker
		}
		return ""
	}
	var b bytes.Buffer
	err = tmpl.Execute(&b, map[string]any{
		"Fatal": MarkerFatal, "Init": MarkerInit, "Start": MarkerOtadStart, "Exit": MarkerOtadExit,
		"Modules": strings.Join(u.Platform.Modules, " "), "Watchdog": u.Platform.Watchdog,
		"MountESP": u.Platform.MountESP, "EnvDevice": u.Platform.EnvDevice,
		"EnvDisk": strings.TrimPrefix(u.Platform.EnvDevice, "/dev/"), "EnvChunkKB": u.EnvChunkKB,
		"Hang": when(Hang, MarkerHang), "Panic": when(Panic, MarkerPanic),
	})
	if err != nil {
		return "", fmt.Errorf("init script: %w", err)
	}
	return b.String(), nil
}

// healthScript is the health check otad runs before committing a slot.
func (u Userland) healthScript() string {
	if u.Behaviour == Unhealthy {
		return "#!/bin/sh\necho \"" + MarkerHealthFail + "\" > /dev/console\nexit 1\n"
	}
	return "#!/bin/sh\necho \"" + MarkerHealthOK + "\" > /dev/console\nexit 0\n"
}

// Archive lays the userland out as an initramfs.
func (u Userland) Archive() (*Archive, error) {
	if u.Version == "" || len(u.OtadBinary) == 0 || len(u.Busybox) == 0 {
		return nil, fmt.Errorf("userland %q: version, otad and busybox are required", u.Version)
	}
	if u.Platform.Watchdog == "" {
		return nil, fmt.Errorf("userland %q: no platform", u.Version)
	}
	if u.EnvChunkKB > 0 && u.Platform.EnvDevice == "" {
		return nil, fmt.Errorf("userland %q: EnvChunkKB without an env device", u.Version)
	}
	script, err := u.InitScript()
	if err != nil {
		return nil, err
	}
	a := NewArchive()
	for _, d := range []string{"proc", "sys", "dev", "run", "tmp", "var/lib/otad", "usr/bin"} {
		a.Dir(d)
	}
	if u.Platform.MountESP {
		a.Dir("boot/efi")
	}
	// The kernel opens /dev/console before /init runs, before devtmpfs is mounted.
	a.CharDev("dev/console", 5, 1)
	a.File("init", []byte(script), 0o755)
	a.File("bin/busybox", u.Busybox, 0o755)
	a.Symlink("bin/sh", "busybox")
	a.File("usr/bin/otad", u.OtadBinary, 0o755)
	a.File("usr/bin/systemctl", []byte(systemctlShim), 0o755)
	a.File("usr/libexec/otad/health-check", []byte(u.healthScript()), 0o755)
	a.File("etc/otad-image-version", []byte(u.Version+"\n"), 0o644)
	a.File("etc/otad/otad.toml", []byte(u.Config.TOML()), 0o644)
	if u.Config.Bootloader == "uboot" {
		a.File("etc/fw_env.config", []byte(GuestFwEnvConfig), 0o644)
	}
	if len(u.PublicKeyPEM) > 0 {
		a.File("etc/otad/keys.d/e2e.pub", u.PublicKeyPEM, 0o644)
	}
	for _, m := range u.Platform.AllModules() {
		ko, ok := u.Modules[m]
		if !ok {
			return nil, fmt.Errorf("userland %q: kernel module %s missing", u.Version, m)
		}
		a.File("lib/modules/"+m+".ko", ko, 0o644)
	}
	return a, nil
}
