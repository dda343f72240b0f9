package slots

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

func TestBootedFromCmdline(t *testing.T) {
	dir := t.TempDir()
	devA := testtool.WriteFile(t, filepath.Join(dir, "mmcblk0p2"), nil)
	devB := testtool.WriteFile(t, filepath.Join(dir, "mmcblk0p3"), nil)
	byLabel := filepath.Join(dir, "by-partlabel")
	if err := os.Mkdir(byLabel, 0o700); err != nil {
		t.Fatal(err)
	}
	linkB := filepath.Join(byLabel, "rootfs-b")
	if err := os.Symlink("../mmcblk0p3", linkB); err != nil {
		t.Fatal(err)
	}
	devices := map[ota.Slot]string{ota.SlotA: devA, ota.SlotB: devB}
	linked := map[ota.Slot]string{ota.SlotA: devA, ota.SlotB: linkB}
	tests := []struct {
		name    string
		cmdline string
		devices map[ota.Slot]string
		want    ota.Slot
		wantErr string
	}{
		{name: "otad.slot", cmdline: "console=ttyS0 otad.slot=B root=" + devA + " rw", devices: devices, want: ota.SlotB},
		{name: "otad.slot wins over rauc.slot", cmdline: "rauc.slot=A otad.slot=B", want: ota.SlotB},
		{name: "rauc.slot", cmdline: "quiet rauc.slot=A\n", want: ota.SlotA},
		{name: "lower case slot", cmdline: "otad.slot=b", want: ota.SlotB},
		{name: "last occurrence wins", cmdline: "otad.slot=A otad.slot=B", want: ota.SlotB},
		{name: "quoted value", cmdline: `init=/sbin/init foo="a b c" otad.slot="A"`, want: ota.SlotA},
		{name: "quoted space does not split", cmdline: `foo="x otad.slot=B" rauc.slot=A`, want: ota.SlotA},
		{name: "root= path", cmdline: "root=" + devB + " rootwait", devices: devices, want: ota.SlotB},
		{name: "root= unclean path", cmdline: "root=" + dir + "/./mmcblk0p2", devices: devices, want: ota.SlotA},
		{name: "root= real path, device configured as symlink", cmdline: "root=" + devB, devices: linked, want: ota.SlotB},
		{name: "root= symlink, device configured as real path", cmdline: "root=" + linkB, devices: devices, want: ota.SlotB},
		{name: "bad otad.slot", cmdline: "otad.slot=C root=" + devA, devices: devices, wantErr: `otad.slot="C" is not a slot name`},
		{name: "bad rauc.slot", cmdline: "rauc.slot=system0", wantErr: `rauc.slot="system0"`},
		{name: "root= unknown device", cmdline: "root=/dev/sda9", devices: devices, wantErr: `root="/dev/sda9" matches none of the slot devices A=` + devA},
		{name: "no devices configured", cmdline: "root=/dev/sda9", wantErr: "(none configured)"},
		{name: "PARTUUID not resolvable", cmdline: "root=PARTUUID=0badc0de-02", devices: devices, wantErr: "/dev/disk/by-partuuid/0badc0de-02 is not there"},
		{name: "unknown root form", cmdline: "root=/dev/nfs nfsroot=server:/srv", devices: devices, wantErr: "matches none"},
		{name: "unknown tag", cmdline: "root=FOO=bar", devices: devices, wantErr: "cannot match this form"},
		{name: "empty", cmdline: "", wantErr: "no otad.slot=, rauc.slot= or root="},
		{name: "empty root", cmdline: "root= ro", devices: devices, wantErr: "no otad.slot="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BootedFromCmdline(tt.cmdline, tt.devices)
			wantBooted(t, "BootedFromCmdline", got, err, tt.want, tt.wantErr)
		})
	}
}

func TestReadBooted(t *testing.T) {
	dir := t.TempDir()
	good := testtool.WriteFile(t, filepath.Join(dir, "cmdline"), []byte("BOOT_IMAGE=/vmlinuz rauc.slot=B ro\n"))
	huge := testtool.WriteFile(t, filepath.Join(dir, "huge"), []byte(strings.Repeat("x", maxCmdline+1)))
	bad := testtool.WriteFile(t, filepath.Join(dir, "bad"), []byte("ro quiet"))
	tests := []struct {
		name, path string
		want       ota.Slot
		wantErr    string
	}{
		{"good", good, ota.SlotB, ""},
		{"missing", filepath.Join(dir, "nope"), "", "nope"},
		{"too large", huge, "", "larger than"},
		{"no slot, names the file", bad, "", bad + ": kernel command line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadBooted(tt.path, nil)
			wantBooted(t, "ReadBooted", got, err, tt.want, tt.wantErr)
		})
	}
}

// wantBooted checks what call returned: an error containing wantErr, or else want.
func wantBooted(t *testing.T, call string, got ota.Slot, err error, want ota.Slot, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("%s() = %q, %v; want error containing %q", call, got, err, wantErr)
		}
		return
	}
	if err != nil || got != want {
		t.Fatalf("%s() = %q, %v; want %q", call, got, err, want)
	}
}

func FuzzBootedFromCmdline(f *testing.F) {
	for _, s := range []string{
		"otad.slot=A", "rauc.slot=B root=/dev/mmcblk0p2", `foo="a b" otad.slot="B"`,
		"root=PARTUUID=1234-02 rw", "root=/dev/sda2", "\"", "root==", "otad.slot=\x00",
	} {
		f.Add(s)
	}
	devices := map[ota.Slot]string{ota.SlotA: "/dev/mmcblk0p2", ota.SlotB: "/dev/mmcblk0p3"}
	f.Fuzz(func(t *testing.T, cmdline string) {
		got, err := BootedFromCmdline(cmdline, devices)
		if err == nil && !got.Valid() {
			t.Fatalf("BootedFromCmdline(%q) = %q without error", cmdline, got)
		}
		if err != nil && got != "" {
			t.Fatalf("BootedFromCmdline(%q) = %q with error %v", cmdline, got, err)
		}
	})
}

// readSmall reads files whose size stat cannot tell (/proc says 0) to their
// end, and regular files into a buffer of their size; over the limit is an
// error either way.
func TestReadSmall(t *testing.T) {
	b, err := readSmall("/proc/self/status", 1<<20)
	if err != nil || !bytes.Contains(b, []byte("VmHWM")) {
		t.Fatalf("/proc/self/status: %d bytes, %v", len(b), err)
	}
	if _, err := readSmall("/proc/self/status", 16); err == nil {
		t.Fatal("a /proc file over the limit was read")
	}
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("otad.slot=B\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := readSmall(p, 1<<20); err != nil || string(b) != "otad.slot=B\n" {
		t.Fatalf("regular file: %q, %v", b, err)
	}
	if _, err := readSmall(p, 4); err == nil {
		t.Fatal("a regular file over the limit was read")
	}
}
