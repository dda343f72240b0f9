// Package packaging holds the systemd unit, the default config and the boot
// scripts; its tests check them with the tools that read them.
package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/device/config"
	"github.com/otad/otad/internal/testkit/testtool"
)

func need(t *testing.T, tool, pkg string) string { t.Helper(); return testtool.Require(t, tool, pkg) }

// systemd-analyze verify checks the unit's syntax, directives and that the
// binary exists: point ExecStart at a real file in a copy of the unit.
func TestUnitVerifies(t *testing.T) {
	bin := need(t, "systemd-analyze", "systemd")
	unit, err := os.ReadFile("otad.service")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "otad")
	os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755)
	text := strings.Replace(string(unit), "/usr/bin/otad", fake, 1)
	for _, want := range []string{"Type=notify", "WatchdogSec=", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict", "CapabilityBoundingSet="} {
		if !strings.Contains(text, want) {
			t.Errorf("unit lacks %s", want)
		}
	}
	path := filepath.Join(dir, "otad.service")
	os.WriteFile(path, []byte(text), 0o644)
	out, err := exec.Command(bin, "verify", path).CombinedOutput()
	// Lines about other units on the host are not ours.
	var ours []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "otad.service") {
			ours = append(ours, l)
		}
	}
	if err != nil || len(ours) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// The shipped unit names no board: no device but the pseudo ones, no path
// that may be missing without a "-" (226/NAMESPACE otherwise). What a board
// needs comes from `otad config check --unit-dropin`, and the unit with that
// drop-in verifies, for a U-Boot board on eMMC and for an EFI PC.
func TestUnitAndBoardDropinVerify(t *testing.T) {
	bin := need(t, "systemd-analyze", "systemd")
	unit, err := os.ReadFile("otad.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(unit), "\n") {
		switch {
		case strings.HasPrefix(l, "DeviceAllow="):
			t.Errorf("the shipped unit allows a board's device: %q (the drop-in's)", l)
		case strings.HasPrefix(l, "ReadWritePaths="):
			for _, p := range strings.Fields(strings.TrimPrefix(l, "ReadWritePaths=")) {
				if !strings.HasPrefix(p, "-") {
					t.Errorf("ReadWritePaths %s without '-': a board without it fails the unit", p)
				}
			}
		}
	}
	otadBin := filepath.Join(t.TempDir(), "otad")
	if out, err := exec.Command("go", "build", "-o", otadBin, "../cmd/otad").CombinedOutput(); err != nil {
		t.Fatalf("go build otad: %v\n%s", err, out)
	}
	shipped, err := os.ReadFile("otad.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, board := range []struct {
		name, slotA, slotB, bootloader string
		want                           []string
	}{
		{"uboot", "/dev/mmcblk0p2", "/dev/mmcblk0p3", "type = \"uboot\"\nenv_config = \"FW\"",
			[]string{"DeviceAllow=/dev/mmcblk0p2 rw", "DeviceAllow=/dev/mmcblk0boot1 rw"}},
		{"grub", "/dev/vda2", "/dev/vda3", "type = \"grub\"\nenv_file = \"/boot/efi/EFI/BOOT/grubenv\"",
			[]string{"DeviceAllow=/dev/vda3 rw", "ReadWritePaths=-/boot/efi/EFI/BOOT"}},
	} {
		t.Run(board.name, func(t *testing.T) {
			dir := t.TempDir()
			fw := filepath.Join(dir, "fw_env.config")
			os.WriteFile(fw, []byte("/dev/mmcblk0boot1 0x0 0x4000\n/dev/mmcblk0boot1 0x4000 0x4000\n"), 0o644)
			cfg := strings.NewReplacer(`compatible = ""`, `compatible = "acme,gw-v2"`, `A = ""`, `A = "`+board.slotA+`"`, `B = ""`, `B = "`+board.slotB+`"`,
				"type = \"uboot\"                   # uboot | grub: check it is your board's\nenv_config = \"/etc/fw_env.config\"",
				strings.Replace(board.bootloader, "FW", fw, 1)).Replace(string(shipped))
			cfgPath := filepath.Join(dir, "otad.toml")
			os.WriteFile(cfgPath, []byte(cfg), 0o644)
			dropin, err := exec.Command(otadBin, "config", "check", "-file-only", "--unit-dropin", "-c", cfgPath).Output()
			if err != nil {
				t.Fatalf("otad config check --unit-dropin: %v\n%s", err, cfg)
			}
			for _, w := range board.want {
				if !strings.Contains(string(dropin), w+"\n") {
					t.Errorf("drop-in lacks %q:\n%s", w, dropin)
				}
			}
			units := filepath.Join(dir, "units")
			os.MkdirAll(filepath.Join(units, "otad.service.d"), 0o755)
			fake := filepath.Join(dir, "otad-bin")
			os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755)
			os.WriteFile(filepath.Join(units, "otad.service"), []byte(strings.Replace(string(unit), "/usr/bin/otad", fake, 1)), 0o644)
			os.WriteFile(filepath.Join(units, "otad.service.d", "board.conf"), dropin, 0o644)
			cmd := exec.Command(bin, "verify", "otad.service")
			// The unit and its drop-in directory, found by name as systemd
			// finds them (not ./otad.service, which is the unit alone).
			cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+units+":")
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			var ours []string
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, "otad.service") || strings.Contains(l, "board.conf") {
					ours = append(ours, l)
				}
			}
			if err != nil || len(ours) > 0 {
				t.Fatalf("systemd-analyze verify with the drop-in: %v\n%s\n%s", err, out, dropin)
			}
		})
	}
}

// The shipped config does not run as it is: every value that is the
// board's is empty, and the errors name each one. Filled in, it parses with
// the defaults it documents.
func TestShippedConfigNamesWhatToEdit(t *testing.T) {
	b, err := os.ReadFile("otad.toml")
	if err != nil {
		t.Fatal(err)
	}
	mid := filepath.Join(t.TempDir(), "machine-id")
	os.WriteFile(mid, []byte("abc123\n"), 0o644)
	_, err = config.Parse(b, "/etc/otad/otad.toml", mid)
	for _, key := range []string{"compatible", "slots.A", "slots.B"} {
		if err == nil || !strings.Contains(err.Error(), "/etc/otad/otad.toml: "+key+": ") {
			t.Errorf("shipped config: error %v does not name %s", err, key)
		}
	}
	filled := strings.NewReplacer(`compatible = ""`, `compatible = "acme,gw-v2"`,
		`A = ""`, `A = "/dev/mmcblk0p2"`, `B = ""`, `B = "/dev/mmcblk0p3"`).Replace(string(b))
	c, err := config.Parse([]byte(filled), "otad.toml", mid)
	if err != nil {
		t.Fatal(err)
	}
	if c.DeviceID != "abc123" || c.Bootloader.Type != "uboot" || c.MQTT.Broker != "" || c.Trust.KeysDir != "/etc/otad/keys.d" ||
		c.Commit.HealthCommand[0] != "/usr/libexec/otad/health-check" {
		t.Fatalf("%+v", c)
	}
}

// make build gives the three binaries one version, the one packaging/version
// prints (and make deb gives the package: ci-deb.sh checks that).
func TestBinariesCarryTheVersion(t *testing.T) {
	mk := need(t, "make", "make")
	bin := t.TempDir()
	out, err := exec.Command(mk, "-s", "-C", "..", "version").Output()
	if err != nil {
		t.Fatalf("make version: %v", err)
	}
	version := strings.TrimSpace(string(out))
	if version == "" || strings.Contains(version, "-") {
		t.Fatalf("make version = %q: not a native Debian version", version)
	}
	if out, err := exec.Command(mk, "-s", "-C", "..", "build", "BIN="+bin, "VERSION="+version).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	for _, b := range []string{"otad", "otactl", "otasim"} {
		for _, arg := range []string{"--version", "version"} {
			out, err := exec.Command(filepath.Join(bin, b), arg).Output()
			if got := strings.TrimSpace(string(out)); err != nil || got != b+" "+version {
				t.Errorf("%s %s = %q, %v; want %q", b, arg, got, err, b+" "+version)
			}
		}
	}
}
