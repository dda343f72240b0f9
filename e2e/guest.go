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
)

// Modules are the kernel modules the guest loads, in order (QEMU.md): virtio
// block and net, ext4 for the data partition, vfat for the ESP (nls_ascii is
// the iocharset vfat asks for), and the i6300esb watchdog.
func Modules() []string {
	return []string{
		"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci", "virtio_blk",
		"failover", "net_failover", "virtio_net",
		"crc32c_generic", "crc16", "mbcache", "jbd2", "ext4",
		"fat", "vfat", "nls_cp437", "nls_ascii",
		"watchdog",
	}
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
)

// GuestConfig is what goes into the guest's /etc/otad/otad.toml.
type GuestConfig struct {
	BrokerPort    int    // mosquitto on the host's 127.0.0.1, reached as 10.0.2.2; 0: no [mqtt]
	CommitWindow  string // Go duration, e.g. "60s"
	HealthCommand bool   // run /usr/libexec/otad/health-check
}

// TOML renders the config (SPEC §10) for the guest's disk layout: the ESP's
// grubenv for the grub backend, slots on vda2/vda3, the journal on vda4.
func (c GuestConfig) TOML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device_id = %q\ncompatible = %q\nstate_dir = \"/var/lib/otad\"\ncontrol_socket = \"/run/otad/otad.sock\"\n\n", GuestDeviceID, GuestCompatible)
	if c.BrokerPort != 0 {
		fmt.Fprintf(&b, "[mqtt]\nbroker = \"mqtt://%s:%d\"\n\n", GuestHostAddr, c.BrokerPort)
	}
	b.WriteString("[trust]\nkeys_dir = \"/etc/otad/keys.d\"\n\n")
	b.WriteString("[slots]\nA = \"/dev/vda2\"\nB = \"/dev/vda3\"\ncmdline = \"/proc/cmdline\"\n\n")
	fmt.Fprintf(&b, "[bootloader]\ntype = \"grub\"\nenv_file = %q\n\n", GuestGrubenv)
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
	Version      string // /etc/otad-image-version, printed by init
	Behaviour    Behaviour
	Config       GuestConfig
	PublicKeyPEM []byte // trusted by otad (keys.d/e2e.pub)
	OtadBinary   []byte // static otad
	Busybox      []byte // static busybox
	// Modules maps a module name of Modules() (and "i6300esb") to its .ko bytes.
	Modules map[string][]byte
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
echo "{{.Init}} version=$VERSION slot=$SLOT uptime=$(cut -d' ' -f1 /proc/uptime) date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
for m in {{.Modules}}; do
  insmod /lib/modules/$m.ko || fatal "insmod $m"
done
# heartbeat=5: a guest that stops feeding /dev/watchdog is reset about 5 s later.
insmod /lib/modules/i6300esb.ko heartbeat=5 || fatal "insmod i6300esb"
i=0
while [ ! -b /dev/vda4 ] || [ ! -c /dev/watchdog ]; do
  i=$((i+1)); [ $i -gt 100 ] && fatal "no /dev/vda4 or /dev/watchdog"
  sleep 0.1
done
{{if .Hang}}
echo "{{.Hang}}: arming the watchdog and never feeding it"
echo 1 > /dev/watchdog
while :; do sleep 3600; done
{{end}}
watchdog -T 5 -t 1 /dev/watchdog || fatal "watchdog daemon"
mkdir -p /boot/efi /var/lib/otad
mount -t vfat -o rw /dev/vda1 /boot/efi || fatal "mount ESP /dev/vda1"
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
umount /boot/efi /var/lib/otad
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
	var b bytes.Buffer
	err = tmpl.Execute(&b, map[string]any{
		"Fatal": MarkerFatal, "Init": MarkerInit, "Start": MarkerOtadStart, "Exit": MarkerOtadExit,
		"Modules": strings.Join(Modules(), " "),
		"Hang": func() string {
			if u.Behaviour == Hang {
				return MarkerHang
			}
			return ""
		}(),
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
	script, err := u.InitScript()
	if err != nil {
		return nil, err
	}
	a := NewArchive()
	for _, d := range []string{"proc", "sys", "dev", "run", "tmp", "boot/efi", "var/lib/otad", "usr/bin"} {
		a.Dir(d)
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
	if len(u.PublicKeyPEM) > 0 {
		a.File("etc/otad/keys.d/e2e.pub", u.PublicKeyPEM, 0o644)
	}
	for _, m := range append(Modules(), "i6300esb") {
		ko, ok := u.Modules[m]
		if !ok {
			return nil, fmt.Errorf("userland %q: kernel module %s missing", u.Version, m)
		}
		a.File("lib/modules/"+m+".ko", ko, 0o644)
	}
	return a, nil
}
