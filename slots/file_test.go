package slots

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

func TestCapacity(t *testing.T) {
	dir := t.TempDir()
	f := makeSlot(t, dir, "slot", 123457)
	if got, err := Capacity(f); err != nil || got != 123457 {
		t.Errorf("Capacity(file) = %d, %v; want 123457", got, err)
	}
	if _, err := Capacity(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Capacity(missing) error %v should name the file", err)
	}
	if _, err := Capacity(dir); err == nil || !strings.Contains(err.Error(), "neither a block device nor a regular file") {
		t.Errorf("Capacity(dir) error = %v", err)
	}
}

func TestFindMount(t *testing.T) {
	const mountinfo = `22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
40 27 179:2 / /mnt/old\040root rw - ext4 /dev/mmcblk0p2 rw
short line
`
	tests := []struct {
		name string
		devs []string
		want string
	}{
		{"root device", []string{"254:0"}, "254:0 on /"},
		{"escaped mount point", []string{"179:3", "179:2"}, `179:2 on /mnt/old root`},
		{"not mounted", []string{"179:3"}, ""},
		{"pseudo fs numbers are matched exactly", []string{"0:2"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			devs := map[string]bool{}
			for _, d := range tt.devs {
				devs[d] = true
			}
			got, err := findMount(strings.NewReader(mountinfo), devs)
			if err != nil || got != tt.want {
				t.Errorf("findMount() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// loopDevice attaches a loop device to a fresh file of size bytes.
func loopDevice(t *testing.T, size int) string {
	t.Helper()
	losetup := testtool.Require(t, "losetup", "mount")
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("block device tests need root")
		}
		t.Skip("block device tests need root")
	}
	backing := makeSlot(t, t.TempDir(), "backing", size)
	out, err := exec.Command(losetup, "--find", "--show", backing).CombinedOutput()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("losetup: %v: %s", err, out)
		}
		t.Skipf("no loop device available: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command(losetup, "--detach", dev).Run() })
	return dev
}

func TestWriteBlockDevice(t *testing.T) {
	const slotSize = 4 << 20
	dev := loopDevice(t, slotSize)
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	if got, err := Capacity(dev); err != nil || got != slotSize {
		t.Fatalf("Capacity(%s) = %d, %v; want %d", dev, got, err, slotSize)
	}
	img := testImage(3<<20+512, 10)
	srv := serveBytes(t, compressed(t, img, "zstd"))
	job := Job{Payload: ota.Payload{URL: srv.URL, Compression: "zstd", Size: int64(len(img)), SHA256: sha(img)}, Target: File(dev), Readback: true}

	t.Run("mounted device refused", func(t *testing.T) {
		mi := filepath.Join(t.TempDir(), "mountinfo")
		line := "99 27 " + devString(st.Rdev) + " / /mnt/slot rw - ext4 " + dev + " rw\n"
		if err := os.WriteFile(mi, []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
		tun := testTuning()
		tun.mountinfo = mi
		err := write(t.Context(), job, tun)
		if ota.CodeOf(err) != ota.CodeWriteFailed || !strings.Contains(err.Error(), "is mounted ("+devString(st.Rdev)+" on /mnt/slot)") {
			t.Fatalf("Write() = %v, want write_failed: mounted", err)
		}
	})
	t.Run("exclusively opened device refused", func(t *testing.T) {
		fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		err = write(t.Context(), job, testTuning())
		if ota.CodeOf(err) != ota.CodeWriteFailed || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("Write() = %v, want write_failed: in use", err)
		}
	})
	t.Run("booted device by another path refused", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "by-partlabel-a")
		if err := os.Symlink(dev, link); err != nil {
			t.Fatal(err)
		}
		err := write(t.Context(), Job{Payload: ota.Payload{URL: srv.URL, Compression: "zstd", Size: job.Size, SHA256: job.SHA256}, Target: File(link), Booted: File(dev)}, testTuning())
		if ota.CodeOf(err) != ota.CodeWriteFailed || !strings.Contains(err.Error(), "booted slot") {
			t.Fatalf("Write() = %v, want write_failed: booted", err)
		}
	})
	t.Run("image too big for the device", func(t *testing.T) {
		big := Job{Payload: ota.Payload{URL: srv.URL, Compression: "zstd", Size: slotSize + 1, SHA256: job.SHA256}, Target: File(dev)}
		if err := Write(t.Context(), big); ota.CodeOf(err) != ota.CodeSizeMismatch {
			t.Fatalf("Write() = %v, want size_mismatch", err)
		}
	})
	t.Run("written and read back", func(t *testing.T) {
		if err := Write(context.Background(), job); err != nil {
			t.Fatal(err)
		}
		got := readFile(t, dev)
		if !bytes.Equal(got[:len(img)], img) {
			t.Fatal("device does not hold the image")
		}
		if !bytes.Equal(got[len(img):], bytes.Repeat([]byte{0xA5}, slotSize-len(img))) {
			t.Fatal("device written past the image")
		}
	})
}
