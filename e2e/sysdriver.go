package e2e

// Serial-console markers of the systemd guest's driver (TestSystemd).
const (
	MarkerSysBoot     = "E2E: boot"        // "E2E: boot version=V slot=S layout=L system=running"
	MarkerSysVersions = "E2E: versions"    // "E2E: versions deb=V otad=otad V otactl=none" (the device's package carries no otactl)
	MarkerSysActive   = "E2E: otad active" // "E2E: otad active ActiveState SubState Type NRestarts"
	MarkerSysWaiting  = "E2E: waiting"     // the factory image waits for an update
	MarkerSysReport   = "E2E: report"      // "E2E: report done" ends the report lines
	MarkerSysPoweroff = "E2E: systemctl poweroff"
)

// driverScript is the guest's test driver, run by e2e-driver.service once
// the system is up; it writes to the serial console (StandardOutput=
// file:/dev/ttyS0) and powers off when it cannot go on (MarkerFatal ends
// the host's waits). Every wait is bounded.
//
// On a factory image (otad not installed) it does what docs/operating.md
// tells a person on a board's first day: dpkg -i the package, edit the
// config, put the key in place, otad config check, write the drop-in with
// otad config check --unit-dropin, systemctl enable --now otad. On the grub
// layout it then waits for an update (otad reboots the machine); on the uboot
// layout it reports and powers off. On an updated image (otad installed by
// the factory, enabled) it waits for the commit, an offer the host makes to
// be refused (a warning), the trust directory to go away (an error), the
// watchdog to be fed, then reports the journal by priority and powers off.
const driverScript = `#!/bin/sh
say() { echo "E2E: $*"; }
fatal() { say "FATAL: $*"; systemctl status --no-pager -l otad 2>&1 | sed 's/^/E2E: status: /'; sync; systemctl poweroff; exit 1; }
# journal_wait PATTERN SECONDS: wait for otad to log PATTERN.
journal_wait() {
  i=0
  until journalctl -q _SYSTEMD_UNIT=otad.service -o cat | grep -q -- "$1"; do
    i=$((i+1)); [ $i -gt $(($2*2)) ] && fatal "otad did not log '$1' within $2 s"
    sleep 0.5
  done
}
versions() {
  say "versions deb=$(dpkg-query -W -f '${Version}' otad) otad=$(otad --version) otactl=$(command -v otactl || echo none)"
}
active() {
  i=0
  until systemctl is-active -q otad; do
    i=$((i+1)); [ $i -gt 240 ] && fatal "otad.service is not active"
    sleep 0.5
  done
  say "otad active $(systemctl show otad -p ActiveState -p SubState -p Type -p NRestarts -p StatusText | tr '\n' ' ')"
}
follow() { journalctl -q -f _SYSTEMD_UNIT=otad.service -o cat | sed -u 's/^/E2E: otad: /' & }

layout=$(cat /etc/e2e/layout)
version=$(cat /etc/otad-image-version)
slot=$(sed -n 's/.*otad\.slot=\([AB]\).*/\1/p' /proc/cmdline)
state=$(timeout 120 systemctl is-system-running --wait)
say "boot version=$version slot=$slot layout=$layout system=$state"

if ! dpkg-query -W otad >/dev/null 2>&1; then
  say "first day: dpkg -i /root/otad.deb"
  dpkg -i /root/otad.deb 2>&1 | sed 's/^/E2E: dpkg: /'
  dpkg-query -W otad >/dev/null 2>&1 || fatal "dpkg -i failed"
  versions
  if otad config check >/dev/null 2>&1; then fatal "otad config check passed on the shipped config"; fi
  cp /etc/e2e/otad.toml /etc/otad/otad.toml
  cp /etc/e2e/release.pub /etc/otad/keys.d/release.pub
  [ ! -f /etc/e2e/fw_env.config ] || cp /etc/e2e/fw_env.config /etc/fw_env.config
  out=$(otad config check 2>&1) || fatal "otad config check: $out"
  say "config check: valid"
  mkdir -p /etc/systemd/system/otad.service.d
  otad config check --unit-dropin >/etc/systemd/system/otad.service.d/board.conf || fatal "otad config check --unit-dropin"
  sed 's/^/E2E: dropin: /' /etc/systemd/system/otad.service.d/board.conf
  systemctl daemon-reload
  systemctl enable --now otad 2>&1 | sed 's/^/E2E: enable: /'
  active
  follow
  if [ "$layout" = grub ]; then
    say "waiting for an update"
    sleep 600
    fatal "no reboot into the update within 600 s"
  fi
  [ ! -e /boot/efi ] || fatal "/boot/efi exists on the uboot layout"
  say "no /boot/efi"
  journal_wait "mark=good slot=$slot" 60
  otad status 2>&1 | sed 's/^/E2E: status: /'
  say "report done"
else
  say "updated: otad installed by the image"
  active
  follow
  versions
  journal_wait "mark=good slot=$slot" 180
  otad status 2>&1 | sed 's/^/E2E: status: /'
  say "committed: waiting for a refused offer"
  journal_wait "offer refused" 120
  mv /etc/otad/keys.d /etc/otad/keys.d.gone
  journal_wait "reloading trusted keys" 30
  fed=$(systemctl show otad -p WatchdogTimestampMonotonic --value)
  i=0
  until [ "$(systemctl show otad -p WatchdogTimestampMonotonic --value)" != "$fed" ]; do
    i=$((i+1)); [ $i -gt 90 ] && fatal "the watchdog was not fed within 45 s"
    sleep 0.5
  done
  say "watchdog fed: $(systemctl show otad -p WatchdogUSec -p WatchdogTimestamp -p NRestarts | tr '\n' ' ')"
  for p in err warning info; do
    journalctl -q _SYSTEMD_UNIT=otad.service -p $p -o cat | sed "s/^/E2E: journal $p: /"
  done
  journalctl -q _SYSTEMD_UNIT=otad.service -o export | sed -n 's/^PRIORITY=//p' | sort | uniq -c | while read n p; do say "priority $p entries $n"; done
  say "report done"
fi
sync
say "systemctl poweroff"
systemctl poweroff
`

// driverUnit runs the driver once the system is up.
const driverUnit = `[Unit]
Description=otad e2e test driver (writes to the serial console)
After=multi-user.target
[Service]
Type=simple
ExecStart=/usr/local/sbin/e2e-driver
StandardOutput=file:/dev/ttyS0
StandardError=inherit
[Install]
WantedBy=multi-user.target
`

// networkUnit gives the guest QEMU's user-network address; 10.0.2.2 is the
// host, where the broker and the payload server listen.
const networkUnit = `[Match]
Type=ether
[Network]
Address=10.0.2.15/24
LinkLocalAddressing=no
IPv6AcceptRA=no
`

// fstab is the guest's: the root is rw (the kernel mounts it ro), the data
// partition holds otad's state in both slots; a PC mounts its ESP at
// /boot/efi, a U-Boot board has none.
func fstab(layout string) string {
	s := "/dev/root / ext4 rw,noatime 0 0\nPARTLABEL=data /var/lib/otad ext4 defaults,noatime 0 0\n"
	if layout == "grub" {
		s += "PARTLABEL=ESP /boot/efi vfat defaults 0 0\n"
	}
	return s
}
