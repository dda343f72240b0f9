package node

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/otad/otad/device/config"
)

// A command line naming no slot does not hide the bootloader's problem:
// config check reports every problem at once (docs/contract/config.md).
func TestCheckReportsBootEnvBesideCmdline(t *testing.T) {
	for _, c := range []struct {
		name    string
		cmdline string
		want    []string // the refused keys, in order
	}{
		{"no slot, no fw_env.config", "console=ttyS0\n", []string{"slots.cmdline", "bootloader.env_config"}},
		{"slot A, no fw_env.config", "console=ttyS0 otad.slot=A\n", []string{"bootloader.env_config"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cmdline := filepath.Join(dir, "cmdline")
			if err := os.WriteFile(cmdline, []byte(c.cmdline), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := &config.Config{Path: "otad.toml", StateDir: filepath.Join(dir, "state"),
				Slots:      config.Slots{A: filepath.Join(dir, "a"), B: filepath.Join(dir, "b"), Cmdline: cmdline},
				Bootloader: config.Bootloader{Type: "uboot", EnvConfig: filepath.Join(dir, "fw_env.config"), Attempts: 3},
				Trust:      config.Trust{KeysDir: dir, Threshold: 1}}
			refusals, _ := Check(cfg)
			var got []string
			for _, r := range refusals {
				if r.Key == "slots.cmdline" || r.Key == "bootloader.env_config" {
					got = append(got, r.Key)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("refused %v, want %v: %v", got, c.want, refusals)
			}
		})
	}
}
