// Package packaging holds the systemd unit, the default config and the boot
// scripts; its tests check them with the tools that read them.
package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/internal/config"
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

// The shipped default config parses (with the machine ID default supplied).
func TestDefaultConfigParses(t *testing.T) {
	b, err := os.ReadFile("otad.toml")
	if err != nil {
		t.Fatal(err)
	}
	mid := filepath.Join(t.TempDir(), "machine-id")
	os.WriteFile(mid, []byte("abc123\n"), 0o644)
	c, err := config.Parse(b, "otad.toml", mid)
	if err != nil {
		t.Fatal(err)
	}
	if c.DeviceID != "abc123" || c.Bootloader.Type != "uboot" || c.MQTT.Broker == "" {
		t.Fatalf("%+v", c)
	}
}
