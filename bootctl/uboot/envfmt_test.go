package uboot

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/ota"
	"golang.org/x/sys/unix"
)

// rawEnv builds a copy by hand, independent of EncodeEnv.
func rawEnv(size int, redundant bool, flags byte, data string) []byte {
	hdr := 4
	if redundant {
		hdr = 5
	}
	b := make([]byte, size)
	copy(b[hdr:], data)
	if redundant {
		b[4] = flags
	}
	binary.LittleEndian.PutUint32(b, crc32.ChecksumIEEE(b[hdr:]))
	return b
}

func TestParseEnv(t *testing.T) {
	tests := []struct {
		name    string
		buf     []byte
		red     bool
		want    map[string]string
		flags   byte
		wantErr bool
	}{
		{"single", rawEnv(64, false, 0, "a=1\x00b=x=y\x00\x00"), false, map[string]string{"a": "1", "b": "x=y"}, 0, false},
		{"redundant", rawEnv(64, true, 7, "a=1\x00\x00"), true, map[string]string{"a": "1"}, 7, false},
		{"empty env", rawEnv(16, false, 0, ""), false, map[string]string{}, 0, false},
		{"empty value kept", rawEnv(32, false, 0, "a=\x00\x00"), false, map[string]string{"a": ""}, 0, false},
		{"no '=' skipped, duplicate: last wins", rawEnv(64, false, 0, "junk\x00a=1\x00=v\x00a=2\x00\x00"), false, map[string]string{"a": "2"}, 0, false},
		{"stops at the empty entry", rawEnv(64, false, 0, "a=1\x00\x00b=2\x00\x00"), false, map[string]string{"a": "1"}, 0, false},
		{"redundant copy read as single fails crc", rawEnv(64, true, 1, "a=1\x00\x00"), false, nil, 0, true},
		{"bad crc", append([]byte{1, 2, 3, 4}, "a=1\x00\x00"...), false, nil, 0, true},
		{"no terminator", rawEnv(8, false, 0, "a=12"), false, nil, 0, true},
		{"last entry unterminated", rawEnv(9, false, 0, "a=1\x00b"), false, nil, 0, true},
		{"too short", []byte{0, 0, 0, 0}, false, nil, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, fl, err := ParseEnv(tt.buf, tt.red)
			if tt.wantErr {
				if !errors.Is(err, bootctl.ErrBadEnv) {
					t.Fatalf("err = %v, want ErrBadEnv", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) || fl != tt.flags {
				t.Fatalf("got %v flags %d, want %v flags %d", got, fl, tt.want, tt.flags)
			}
		})
	}
}

func TestEncodeEnv(t *testing.T) {
	vars := map[string]string{"b": "2", "a": "1", ".flags": "x:sa"}
	got, err := EncodeEnv(vars, 32, true, 9)
	if err != nil {
		t.Fatal(err)
	}
	if want := rawEnv(32, true, 9, ".flags=x:sa\x00a=1\x00b=2\x00\x00"); !bytes.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	// Exactly full: data (4+4+1) fills a 13-byte single env.
	if _, err := EncodeEnv(map[string]string{"a": "1", "b": "2"}, 13, false, 0); err != nil {
		t.Fatalf("exact fit: %v", err)
	}
	if _, err := EncodeEnv(map[string]string{"a": "1", "b": "22"}, 13, false, 0); err == nil {
		t.Fatal("one byte too many was accepted")
	}
	for _, bad := range []map[string]string{{"": "x"}, {"a=b": "x"}, {"a\x00": "x"}, {"a": "x\x00y"}} {
		if _, err := EncodeEnv(bad, 64, false, 0); err == nil {
			t.Errorf("EncodeEnv(%q) accepted", bad)
		}
	}
}

func TestParseConfig(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "env")
	tests := []struct {
		name    string
		cfg     string
		want    []Copy
		wantErr string
	}{
		{"single", f + " 0x0 0x40000\n", []Copy{{Path: f, Size: 0x40000}}, ""},
		{"sizes without 0x, sectors", "# c\n\n" + f + " 0 4000 2000 2\n", []Copy{{Path: f, Size: 0x4000, SectorSize: 0x2000, Sectors: 2}}, ""},
		{"redundant, decimal and octal offsets", f + "\t8192 0x4000\n" + f + " 040000 0x4000\n", []Copy{{Path: f, Offset: 8192, Size: 0x4000}, {Path: f, Offset: 0o40000, Size: 0x4000}}, ""},
		{"negative offset", f + " -0x4000 0x4000\n", []Copy{{Path: f, Offset: -0x4000, Size: 0x4000}}, ""},
		{"third line ignored", f + " 0 10\n" + f + " 0x10 10\n" + f + " 0x20 10\n", []Copy{{Path: f, Size: 16}, {Path: f, Offset: 16, Size: 16}}, ""},
		{"short lines skipped", "foo\n" + f + " 0\n" + f + " 0 0x100\n", []Copy{{Path: f, Size: 0x100}}, ""},
		{"bad offset skips the line", f + " zz 0x100\n" + f + " 0 0x100\n", []Copy{{Path: f, Size: 0x100}}, ""},
		{"size zero", f + " 0 0\n", nil, "env size is 0"},
		{"sizes differ", f + " 0 0x100\n" + f + " 0x100 0x200\n", nil, "differ in size"},
		{"no device", "# nothing\n", nil, "no environment device"},
		{"too small", f + " 0 4\n", nil, "smaller than its header"},
		{"mtd refused", "/dev/mtd1 0x0 0x10000 0x10000\n", nil, "MTD/UBI"},
		{"size beyond any env", f + " 0 0x7fffffffffff\n", nil, "is over the 4 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig("fw_env.config", []byte(tt.cfg))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "fw_env.config") {
					t.Fatalf("err = %v, want one naming the file and %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %+v, want %+v", got, tt.want)
				}
			}
		})
	}
}

func TestNegativeOffsetFromEnd(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "disk")
	writeImage(t, img, 0x10000, map[int64][]byte{0x10000 - envSize: mustEncode(t, map[string]string{"k": "v"}, false, 0)})
	cfg := filepath.Join(dir, "cfg")
	os.WriteFile(cfg, []byte(img+" -0x4000 0x4000\n"), 0o644)
	e := testOpen(t, cfg)
	snap, err := e.Load(context.Background())
	if err != nil || snap.Vars["k"] != "v" {
		t.Fatalf("%v %v", snap.Vars, err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.config"), 3, nil); err == nil || !strings.Contains(err.Error(), "missing.config") {
		t.Fatalf("missing config: %v", err)
	}
	cfg := filepath.Join(dir, "cfg")
	os.WriteFile(cfg, []byte(filepath.Join(dir, "nodev")+" 0 0x100\n"), 0o644)
	for _, n := range []int{0, -1, math.MaxInt32 + 1} {
		if _, err := Open(cfg, n, nil); err == nil {
			t.Fatalf("attempts %d accepted: RAUC allows 1..%d", n, math.MaxInt32)
		}
	}
	if _, err := Open(cfg, 10, nil); err != nil {
		t.Fatalf("attempts 10 (written \"a\", as RAUC does): %v", err)
	}
	e, err := Open(cfg, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.WithLockFile("")
	if _, err := e.State(context.Background()); err == nil || !strings.Contains(err.Error(), "nodev") {
		t.Fatalf("missing device: %v", err)
	}
	for _, s := range []ota.Slot{"C", "", "a"} {
		if err := e.MarkGood(context.Background(), s); !errors.Is(err, bootctl.ErrUnknownSlot) {
			t.Fatalf("MarkGood(%q): %v", s, err)
		}
	}
}

// A write that changes nothing is not written: re-marking a slot after a reboot
// must not put an env at risk for no reason.
func TestNoOpMarkDoesNotWrite(t *testing.T) {
	cfg, _ := setup(t, layouts[1], base)
	e := testOpen(t, cfg)
	writes := 0
	e.disk.WriteAt = func(f *os.File, b []byte, off int64) (int, error) { writes++; return f.WriteAt(b, off) }
	ctx := context.Background()
	if err := e.MarkBad(ctx, "B"); err != nil {
		t.Fatal(err)
	}
	if err := e.MarkBad(ctx, "B"); err != nil {
		t.Fatal(err)
	}
	if writes != 1 {
		t.Fatalf("%d writes, want 1", writes)
	}
}

// The fw_printenv lock is honoured and waiting for it respects ctx.
func TestLockWaitsAndCancels(t *testing.T) {
	cfg, _ := setup(t, layouts[0], base)
	lock := filepath.Join(t.TempDir(), "fw_printenv.lock")
	e := testOpen(t, cfg).WithLockFile(lock)
	f, err := os.OpenFile(lock, os.O_WRONLY|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := e.MarkBad(ctx, "A"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("MarkBad under a held lock: %v", err)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if err := e.MarkBad(context.Background(), "A"); err != nil {
		t.Fatal(err)
	}
}

func FuzzParseUBootEnv(f *testing.F) {
	f.Add(rawEnv(64, false, 0, "BOOT_ORDER=A B\x00BOOT_A_LEFT=3\x00\x00"), false)
	f.Add(rawEnv(64, true, 0xff, "a=1\x00b=\x00\x00"), true)
	f.Add(rawEnv(16, false, 0, "junk\x00=x\x00"), false)
	f.Add([]byte{0, 0, 0, 0, 0}, true)
	f.Add([]byte("garbage that is not an environment"), false)
	f.Fuzz(func(t *testing.T, buf []byte, red bool) {
		vars, flags, err := ParseEnv(buf, red)
		if err != nil {
			if !errors.Is(err, bootctl.ErrBadEnv) {
				t.Fatalf("error not ErrBadEnv: %v", err)
			}
			return
		}
		// Whatever parses re-encodes into the same size and parses back identically.
		out, err := EncodeEnv(vars, len(buf), red, flags)
		if err != nil {
			t.Fatalf("re-encode of parsed vars: %v", err)
		}
		back, fl2, err := ParseEnv(out, red)
		if err != nil || fl2 != flags || !maps.Equal(back, vars) {
			t.Fatalf("round trip: %v %d %v, want %v %d", back, fl2, err, vars, flags)
		}
	})
}

func FuzzEncodeUBootEnv(f *testing.F) {
	f.Add("BOOT_ORDER", "A B", "x", "", 64, false, byte(0))
	f.Add("a", "b=c", ".flags", "a:sa", 16, true, byte(255))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, size int, red bool, flags byte) {
		if size < 0 || size > 1<<16 {
			return
		}
		vars := map[string]string{k1: v1, k2: v2}
		buf, err := EncodeEnv(vars, size, red, flags)
		if err != nil {
			return // invalid names or does not fit
		}
		if len(buf) != size {
			t.Fatalf("len %d, want %d", len(buf), size)
		}
		got, fl, err := ParseEnv(buf, red)
		if err != nil || !maps.Equal(got, vars) || (red && fl != flags) {
			t.Fatalf("parse(encode(%q)) = %q, %d, %v", vars, got, fl, err)
		}
	})
}

// FuzzParseConfig: whatever a fw_env.config says, an accepted one is one or
// two copies of one size that the env can be read into.
func FuzzParseConfig(f *testing.F) {
	for _, c := range []string{"/e 0x0 0x40000\n", "/e 8192 4000\n/e 040000 4000\n", "/e -0x4000 0x4000 0x2000 2\n", "/dev/mtd0 0 0x10000\n"} {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, cfg string) {
		devs, err := ParseConfig("fw_env.config", []byte(cfg))
		if err != nil {
			return
		}
		if len(devs) < 1 || len(devs) > 2 || devs[0].Size <= headerSize(len(devs) == 2) || devs[0].Size > MaxEnvSize || devs[len(devs)-1].Size != devs[0].Size {
			t.Fatalf("ParseConfig(%q) accepted %+v", cfg, devs)
		}
	})
}
