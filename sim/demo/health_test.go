package demo

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/bootctl/sim"
)

func TestCheckHealth(t *testing.T) {
	dir := t.TempDir()
	good, broken, other, empty := filepath.Join(dir, "good"), filepath.Join(dir, "broken"), filepath.Join(dir, "other"), filepath.Join(dir, "empty")
	if _, err := WriteImageFile(good, ImageSpec{Version: "2.0.0", Size: 8192}); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteImageFile(broken, ImageSpec{Version: "2.1.0", Broken: true, Size: 8192}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte("ELF something else entirely"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// bootA: the sim booted A (fresh); bootB: it booted B after B was made active.
	bootA := filepath.Join(dir, "bootA.json")
	if _, err := sim.Open(bootA, 3); err != nil {
		t.Fatal(err)
	}
	bootB := filepath.Join(dir, "bootB.json")
	s, err := sim.Open(bootB, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MarkActive(context.Background(), "B"); err != nil {
		t.Fatal(err)
	}
	if slot, err := s.Boot(); err != nil || slot != "B" {
		t.Fatalf("sim boot: %s %v", slot, err)
	}

	tests := []struct {
		name      string
		env       string
		a, b      string
		slot      string
		unhealthy bool   // ErrUnhealthy
		errText   string // other errors
	}{
		{"A good", bootA, good, broken, "A", false, ""},
		{"B good", bootB, broken, good, "B", false, ""},
		{"A broken", bootA, broken, good, "A", true, "broken image"},
		{"B broken", bootB, good, broken, "B", true, "broken image"},
		{"not a demo image", bootA, other, good, "A", true, "no demo image"},
		{"empty slot", bootB, good, empty, "B", true, "no demo image"},
		{"missing slot file", bootA, filepath.Join(dir, "absent"), good, "", false, "slot A"},
		{"missing env file", filepath.Join(dir, "absent.json"), good, good, "", false, "bootloader.env_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slot, err := CheckHealth(HealthArgs{EnvFile: tt.env, Attempts: 3, Slots: map[string]string{"A": tt.a, "B": tt.b}})
			switch {
			case tt.unhealthy:
				if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), tt.errText) || slot != tt.slot {
					t.Fatalf("slot %q, err %v; want %s unhealthy (%s)", slot, err, tt.slot, tt.errText)
				}
			case tt.errText != "":
				if err == nil || errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("err %v, want one naming %q", err, tt.errText)
				}
			default:
				if err != nil || slot != tt.slot {
					t.Fatalf("slot %q, err %v; want %s healthy", slot, err, tt.slot)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "absent.json")); !os.IsNotExist(err) {
		t.Error("the health check created a boot env")
	}
}
