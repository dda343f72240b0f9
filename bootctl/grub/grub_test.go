package grub

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

func editenv(t *testing.T, file string, args ...string) string {
	t.Helper()
	tool := testtool.Require(t, "grub-editenv", "grub-common")
	out, err := exec.Command(tool, append([]string{file}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("grub-editenv %s %v: %v\n%s", file, args, err, out)
	}
	return string(out)
}

// listVars parses `grub-editenv FILE list`; a value with a newline continues on
// the next output line, which is told apart by having no '=' only in these tests.
func listVars(t *testing.T, file string) map[string]string {
	t.Helper()
	m := map[string]string{}
	last := ""
	for _, l := range strings.Split(strings.TrimSuffix(editenv(t, file, "list"), "\n"), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok || strings.HasPrefix(l, " ") {
			m[last] += "\n" + l
			continue
		}
		m[k], last = v, k
	}
	return m
}

func commentLines(t *testing.T, file string) []string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var c []string
	for _, l := range strings.Split(string(bytes.TrimRight(raw, "#")), "\n") {
		if strings.HasPrefix(l, "#") {
			c = append(c, l)
		}
	}
	return c
}

func inode(t *testing.T, file string) uint64 {
	t.Helper()
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != BlockSize {
		t.Fatalf("%s is %d bytes, want %d", file, fi.Size(), BlockSize)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func open(t *testing.T, file string) *Env {
	t.Helper()
	e, err := Open(file, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestOurWritesReadByGrubEditenv(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "grubenv")
	editenv(t, file, "create")
	editenv(t, file, "set", "saved_entry=1>2", `odd=back\slash`, "ORDER=A B", "A_OK=1", "A_TRY=0", "B_OK=0", "B_TRY=0")
	ino := inode(t, file)
	comments := commentLines(t, file)
	e := open(t, file)
	want := map[string]string{"saved_entry": "1>2", "odd": `back\slash`, "ORDER": "A B", "A_OK": "1", "A_TRY": "0", "B_OK": "0", "B_TRY": "0"}
	steps := []struct {
		do     func(context.Context, ota.Slot) error
		slot   ota.Slot
		change map[string]string
	}{
		// Mark bad takes the slot out of ORDER (padded to its length: in place),
		// mark active puts it first.
		{e.MarkBad, "B", map[string]string{"ORDER": "A  ", "B_OK": "0", "B_TRY": "0"}},
		{e.MarkActive, "B", map[string]string{"ORDER": "B A", "B_OK": "1", "B_TRY": "0"}},
		{e.MarkGood, "B", map[string]string{"B_OK": "1", "B_TRY": "0"}},
		{e.MarkBad, "A", map[string]string{"ORDER": "B  ", "A_OK": "0", "A_TRY": "0"}},
	}
	for i, s := range steps {
		if err := s.do(ctx, s.slot); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		maps.Copy(want, s.change)
		if got := listVars(t, file); !maps.Equal(got, want) {
			t.Fatalf("step %d: grub-editenv list = %v, want %v", i, got, want)
		}
		if inode(t, file) != ino {
			t.Fatalf("step %d: the file was replaced", i)
		}
	}
	// Comments grub-editenv wrote (Debian adds a warning) are still there.
	if got := commentLines(t, file); !slices.Equal(got, comments) {
		t.Fatalf("comments %q, want %q", got, comments)
	}
	st, err := e.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Primary() != "B" || st.Slots["A"].Bootable || st.Slots["B"].AttemptsLeft != -1 {
		t.Fatalf("state %+v", st)
	}
}

func TestGrubEditenvWritesReadByUs(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "grubenv")
	editenv(t, file, "create")
	e := open(t, file)
	want := map[string]string{}
	for i, op := range [][]string{
		{"set", "ORDER=B A", "B_OK=1"},
		{"set", "multi=line1\nline2", `esc=a\b\\c`},
		{"set", "B_TRY=1"},
		{"unset", "ORDER"},
		{"set", "ORDER=A B"},
		{"unset", "multi"},
	} {
		editenv(t, file, op...)
		for _, kv := range op[1:] {
			if op[0] == "unset" {
				delete(want, kv)
				continue
			}
			k, v, _ := strings.Cut(kv, "=")
			want[k] = v
		}
		snap, err := e.Load(ctx)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !maps.Equal(snap.Vars, want) || snap.Broken != -1 {
			t.Fatalf("step %d: got %q, want %q", i, snap.Vars, want)
		}
		raw, _ := os.ReadFile(file)
		if strict, err := ParseEnv(raw); err != nil || !maps.Equal(strict, want) {
			t.Fatalf("step %d: ParseEnv %v %v", i, strict, err)
		}
	}
	// Ours on top, then grub-editenv again on top of ours.
	if err := e.MarkActive(ctx, "A"); err != nil {
		t.Fatal(err)
	}
	editenv(t, file, "set", "extra=1")
	got := listVars(t, file)
	if got["ORDER"] != "A B" || got["A_OK"] != "1" || got["A_TRY"] != "0" || got["extra"] != "1" || got["esc"] != `a\b\\c` {
		t.Fatalf("after mixed writes: %q", got)
	}
}

func TestEncodeEnvReadByGrubEditenv(t *testing.T) {
	vars := map[string]string{"ORDER": "A B", "nl": "x\ny", "bs": `\`, "eq": "a=b", "sp": " lead"}
	buf, err := EncodeEnv(vars)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "grubenv")
	if err := os.WriteFile(file, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := listVars(t, file); !maps.Equal(got, vars) {
		t.Fatalf("grub-editenv list = %q, want %q", got, vars)
	}
	// grub-editenv can still edit it (so the padding and layout are what it expects).
	editenv(t, file, "set", "new=v")
	if got := listVars(t, file); got["new"] != "v" || got["nl"] != "x\ny" {
		t.Fatalf("after grub-editenv set: %q", got)
	}
}

func TestParseEnv(t *testing.T) {
	blk := func(body string) []byte {
		b, _ := pad([]byte(Signature + body))
		return b
	}
	tests := []struct {
		name    string
		buf     []byte
		want    map[string]string
		wantErr bool
	}{
		{"empty", blk(""), map[string]string{}, false},
		{"vars and comments", blk("# c\nA=1\n#x=y\nB=2 3\n"), map[string]string{"A": "1", "B": "2 3"}, false},
		{"escapes", blk("a=x\\\\y\\\nz\n"), map[string]string{"a": "x\\y\nz"}, false},
		{"duplicate: last wins", blk("a=1\na=2\n"), map[string]string{"a": "2"}, false},
		{"empty value, '=' in value", blk("a=\nb=c=d\n"), map[string]string{"a": "", "b": "c=d"}, false},
		{"no signature", []byte("A=1\n"), nil, true},
		{"torn tail", []byte(Signature + "A=1\nB_O####"), nil, true},
		{"line without newline", []byte(Signature + "A=1\nB=2"), nil, true},
		{"not padded to 1024 is still a block", []byte(Signature + "A=1\n"), map[string]string{"A": "1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEnv(tt.buf)
			if tt.wantErr {
				if !errors.Is(err, bootctl.ErrBadEnv) {
					t.Fatalf("err = %v, want ErrBadEnv", err)
				}
				return
			}
			if err != nil || !maps.Equal(got, tt.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestEncodeEnvErrors(t *testing.T) {
	for _, bad := range []map[string]string{{"": "x"}, {"a=b": "x"}, {"a\nb": "x"}, {"#a": "x"}, {"a": "x\x00"}, {"big": strings.Repeat("x", 1000)}} {
		if _, err := EncodeEnv(bad); err == nil {
			t.Errorf("EncodeEnv(%.40q) accepted", bad)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing"), 3, nil); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing: %v", err)
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte(Signature), 0o644)
	if _, err := Open(short, 3, nil); !errors.Is(err, bootctl.ErrBadEnv) || !strings.Contains(err.Error(), "short") {
		t.Fatalf("short: %v", err)
	}
	nosig := filepath.Join(dir, "nosig")
	os.WriteFile(nosig, bytes.Repeat([]byte("#"), BlockSize), 0o644)
	e, err := Open(nosig, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.State(context.Background()); !errors.Is(err, bootctl.ErrBadEnv) || !strings.Contains(err.Error(), "nosig") {
		t.Fatalf("no signature: %v", err)
	}
	good := filepath.Join(dir, "good")
	b, _ := EncodeEnv(nil)
	os.WriteFile(good, b, 0o644)
	e = open(t, good)
	if err := e.MarkBad(context.Background(), "C"); !errors.Is(err, bootctl.ErrUnknownSlot) {
		t.Fatalf("slot C: %v", err)
	}
}

// A first write to an unprovisioned grubenv writes the whole effective state, so
// marking B bad does not take the factory defaults away from A.
func TestFirstWriteKeepsFactoryState(t *testing.T) {
	file := filepath.Join(t.TempDir(), "grubenv")
	b, _ := EncodeEnv(map[string]string{"saved_entry": "0"})
	os.WriteFile(file, b, 0o644)
	e := open(t, file)
	st, err := e.State(context.Background())
	if err != nil || st.Primary() != "A" {
		t.Fatalf("unprovisioned: %+v %v", st, err)
	}
	if err := e.MarkBad(context.Background(), "B"); err != nil {
		t.Fatal(err)
	}
	st, _ = e.State(context.Background())
	if st.Primary() != "A" || st.Slots["B"].Bootable {
		t.Fatalf("after mark bad B: %+v", st)
	}
}

func FuzzParseGrubEnv(f *testing.F) {
	for _, s := range []string{
		"", "A=1\n", "# c\nORDER=A B\nA_OK=1\n", "a=x\\\\y\\\nz\n", "a=1\nB_O", "x=\\", "\nA=1\n", "a\x00b=c\x00d\n",
	} {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("../../testdata/env/grubenv"); err == nil {
		f.Add(b[len(Signature):])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// The raw input (mostly without a signature) must be refused cleanly...
		if _, err := ParseEnv(body); err != nil && !errors.Is(err, bootctl.ErrBadEnv) {
			t.Fatalf("error not ErrBadEnv: %v", err)
		}
		// ...and as the body of a 1024-byte block it exercises the line parser.
		buf := append([]byte(Signature), body...)
		if len(buf) > BlockSize {
			buf = buf[:BlockSize]
		}
		buf, _ = pad(buf)
		vars, err := ParseEnv(buf)
		if err != nil && !errors.Is(err, bootctl.ErrBadEnv) {
			t.Fatalf("error not ErrBadEnv: %v", err)
		}
		entries, broken, err := iterate(buf)
		if err != nil {
			t.Fatalf("signed block refused: %v", err)
		}
		// The in-place editor never breaks a block: setting a variable keeps every
		// other variable GRUB sees (a torn tail is dropped).
		before := toMap(entries)
		out, err := updateBlock(buf, map[string]string{"A_OK": "1"})
		if err == nil {
			after, err := ParseEnv(out)
			if err != nil {
				t.Fatalf("updateBlock produced a bad block: %v\n%q", err, out)
			}
			want := maps.Clone(before)
			want["A_OK"] = "1"
			if !maps.Equal(after, want) {
				t.Fatalf("updateBlock (broken=%d): got %q, want %q", broken, after, want)
			}
		}
		// Round trip: what parses re-encodes (when it fits) to the same variables.
		if vars != nil {
			if enc, err := EncodeEnv(vars); err == nil {
				back, err := ParseEnv(enc)
				if err != nil || !maps.Equal(back, vars) {
					t.Fatalf("round trip %q: %q %v", vars, back, err)
				}
			}
		}
	})
}

func FuzzEncodeGrubEnv(f *testing.F) {
	f.Add("ORDER", "A B", "note", "x\\y\nz")
	f.Add("a", "", "b", "=")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		vars := map[string]string{k1: v1, k2: v2}
		buf, err := EncodeEnv(vars)
		if err != nil {
			return // invalid names or too big
		}
		if len(buf) != BlockSize {
			t.Fatalf("block is %d bytes", len(buf))
		}
		got, err := ParseEnv(buf)
		if err != nil || !maps.Equal(got, vars) {
			t.Fatalf("parse(encode(%q)) = %q, %v", vars, got, err)
		}
	})
}
