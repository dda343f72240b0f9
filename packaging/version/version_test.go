package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestFromDescribe(t *testing.T) {
	// The commit count matters only when git describe found no tag.
	const commits = 21
	for _, c := range []struct{ describe, want string }{
		{"v1.2.3-0-gabcdef0", "1.2.3"},
		{"1.2.3-0-gabcdef0", "1.2.3"},
		{"v1.2.3-0-gabcdef0-dirty", "1.2.3+dirty"},
		{"v1.2.3-4-gabcdef0", "1.2.3+git4.gabcdef0"},
		{"v1.2.3-4-gabcdef0-dirty", "1.2.3+git4.gabcdef0.dirty"},
		{"v1.3.0-rc1-0-g1234567", "1.3.0~rc1"},
		{"v1.3.0-rc1-2-g1234567", "1.3.0~rc1+git2.g1234567"},
		{"20240101-0-g1234567", "20240101"},
		{"5da54b9", "0.0.0+git21.g5da54b9"},
		{"1234567", "0.0.0+git21.g1234567"},
		{"5da54b9-dirty", "0.0.0+git21.g5da54b9.dirty"},
		{"  v2.0.0-0-g1234567\n", "2.0.0"},
	} {
		got, err := fromDescribe(c.describe, commits)
		if err != nil || got != c.want {
			t.Errorf("fromDescribe(%q, %d) = %q, %v; want %q", c.describe, commits, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "dev", "v1.2.3", "release-x-0-g1234567", "v-0-g1234567", "5da54b9"} {
		if got, err := fromDescribe(bad, 0); err == nil {
			t.Errorf("fromDescribe(%q) = %q, want an error", bad, got)
		}
	}
}

// dpkg itself agrees that the mapping keeps git order.
func TestVersionsSortLikeGit(t *testing.T) {
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Skip("missing tool dpkg (apt-get install dpkg)")
	}
	order := []string{"v1.3.0-rc1-0-g1234567", "v1.3.0-rc1-2-g1234567", "v1.3.0-0-g1234567", "v1.3.0-1-gabcdef0", "v1.3.1-0-g1234567"}
	prev := "0.0.0+git99.gfffffff"
	for _, o := range order {
		v, err := fromDescribe(o, 100)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(dpkg, "--compare-versions", prev, "lt", v).CombinedOutput(); err != nil {
			t.Errorf("dpkg: %s is not below %s (%s %v)", prev, v, strings.TrimSpace(string(out)), err)
		}
		prev = v
	}
}

// A release tarball has no .git: the VERSION file says, and a bad one is
// refused with what is wrong.
func TestVersionWithoutGit(t *testing.T) {
	dir := t.TempDir()
	if _, err := version(dir); err == nil || !strings.Contains(err.Error(), "VERSION") {
		t.Errorf("no .git, no VERSION: %v, want an error naming VERSION", err)
	}
	for _, c := range []struct{ file, want string }{{"1.4.0\n", "1.4.0"}, {"2.0~rc1", "2.0~rc1"}, {"1.4.0-1\n", ""}, {"v1.4\n", ""}} {
		os.WriteFile(filepath.Join(dir, "VERSION"), []byte(c.file), 0o644)
		got, err := version(dir)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("VERSION %q: %q, %v; want %q", c.file, got, err, c.want)
		}
	}
}

// The repository's own VERSION file is a version the tarball build accepts.
func TestRepositoryVersionFile(t *testing.T) {
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Check(strings.TrimSpace(string(b))); err != nil {
		t.Error(err)
	}
}

func FuzzFromDescribe(f *testing.F) {
	f.Add("v1.2.3-4-gabcdef0-dirty", 3)
	f.Add("5da54b9", 21)
	f.Fuzz(func(t *testing.T, describe string, commits int) {
		v, err := fromDescribe(describe, commits)
		if err != nil {
			return
		}
		if !nativeVersion.MatchString(v) {
			t.Fatalf("fromDescribe(%q) = %q: not a Debian version", describe, v)
		}
	})
}
