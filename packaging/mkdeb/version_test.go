package main

import (
	"os/exec"
	"strings"
	"testing"
)

func TestDebVersion(t *testing.T) {
	// The commit count matters only when git describe found no tag.
	const commits = 21
	for _, c := range []struct{ describe, want string }{
		{"v1.2.3-0-gabcdef0", "1.2.3-1"},
		{"1.2.3-0-gabcdef0", "1.2.3-1"},
		{"v1.2.3-0-gabcdef0-dirty", "1.2.3+dirty-1"},
		{"v1.2.3-4-gabcdef0", "1.2.3+git4.gabcdef0-1"},
		{"v1.2.3-4-gabcdef0-dirty", "1.2.3+git4.gabcdef0.dirty-1"},
		{"v1.3.0-rc1-0-g1234567", "1.3.0~rc1-1"},
		{"v1.3.0-rc1-2-g1234567", "1.3.0~rc1+git2.g1234567-1"},
		{"20240101-0-g1234567", "20240101-1"},
		{"5da54b9", "0.0.0+git21.g5da54b9-1"},
		{"1234567", "0.0.0+git21.g1234567-1"},
		{"5da54b9-dirty", "0.0.0+git21.g5da54b9.dirty-1"},
		{"  v2.0.0-0-g1234567\n", "2.0.0-1"},
	} {
		got, err := debVersion(c.describe, commits)
		if err != nil || got != c.want {
			t.Errorf("debVersion(%q, %d) = %q, %v; want %q", c.describe, commits, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "dev", "v1.2.3", "release-x-0-g1234567", "v-0-g1234567", "5da54b9"} {
		if got, err := debVersion(bad, 0); err == nil {
			t.Errorf("debVersion(%q) = %q, want an error", bad, got)
		}
	}
}

// dpkg itself agrees that the mapping keeps git order.
func TestDebVersionSortsLikeGit(t *testing.T) {
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Skip("missing tool dpkg (apt-get install dpkg)")
	}
	order := []string{"v1.3.0-rc1-0-g1234567", "v1.3.0-rc1-2-g1234567", "v1.3.0-0-g1234567", "v1.3.0-1-gabcdef0", "v1.3.1-0-g1234567"}
	prev := "0.0.0+git99.gfffffff-1"
	for _, o := range order {
		v, err := debVersion(o, 100)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(dpkg, "--compare-versions", prev, "lt", v).CombinedOutput(); err != nil {
			t.Errorf("dpkg: %s is not below %s (%s %v)", prev, v, strings.TrimSpace(string(out)), err)
		}
		prev = v
	}
}

func FuzzDebVersion(f *testing.F) {
	f.Add("v1.2.3-4-gabcdef0-dirty", 3)
	f.Add("5da54b9", 21)
	f.Fuzz(func(t *testing.T, describe string, commits int) {
		v, err := debVersion(describe, commits)
		if err != nil {
			return
		}
		if !strings.HasSuffix(v, "-1") || !debianUpstream.MatchString(strings.TrimSuffix(v, "-1")) {
			t.Fatalf("debVersion(%q) = %q: not a Debian version", describe, v)
		}
	})
}
