package uboot

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fixtures = "../../testdata/env/"

// fixtureVars reads uboot-env.txt the way mkenvimage does.
func fixtureVars(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(fixtures + "uboot-env.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); l != "" && !strings.HasPrefix(l, "#") {
			k, v, _ := strings.Cut(l, "=")
			m[k] = v
		}
	}
	return m
}

func TestFixtures(t *testing.T) {
	want := fixtureVars(t)
	for _, fx := range []struct {
		file      string
		redundant bool
		flags     byte
	}{{"uboot.env", false, 0}, {"uboot-redund.env", true, 1}} {
		buf, err := os.ReadFile(fixtures + fx.file)
		if err != nil {
			t.Fatal(err)
		}
		got, flags, err := ParseEnv(buf, fx.redundant)
		if err != nil || flags != fx.flags || !maps.Equal(got, want) {
			t.Fatalf("%s: %v flags %d %v, want %v", fx.file, got, flags, err, want)
		}
	}
	// Through Open on a copy, the way a device config names it.
	dir := t.TempDir()
	img := filepath.Join(dir, "uboot.env")
	b, _ := os.ReadFile(fixtures + "uboot.env")
	os.WriteFile(img, b, 0o644)
	cfg := filepath.Join(dir, "fw_env.config")
	os.WriteFile(cfg, []byte(fmt.Sprintf("%s 0x0 0x1000\n", img)), 0o644)
	st, err := testOpen(t, cfg).State(context.Background())
	if err != nil || st.Primary() != "A" || st.Slots["B"].AttemptsLeft != 3 {
		t.Fatalf("%+v %v", st, err)
	}
}
