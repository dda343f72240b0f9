package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestFromDescribe(t *testing.T) {
	// The commit count and the VERSION file matter only when git describe
	// found no tag.
	const commits = 21
	for _, c := range []struct{ describe, base, want string }{
		{"v1.2.3-0-gabcdef0", "0.1.0~dev", "1.2.3"},
		{"1.2.3-0-gabcdef0", "", "1.2.3"},
		{"v1.2.3-0-gabcdef0-dirty", "0.1.0~dev", "1.2.3+dirty"},
		{"v1.2.3-4-gabcdef0", "1.3.0~dev", "1.2.3+git4.gabcdef0"},
		{"v1.2.3-4-gabcdef0-dirty", "", "1.2.3+git4.gabcdef0.dirty"},
		{"v1.3.0-rc1-0-g1234567", "0.1.0~dev", "1.3.0~rc1"},
		{"v1.3.0-rc1-2-g1234567", "0.1.0~dev", "1.3.0~rc1+git2.g1234567"},
		{"20240101-0-g1234567", "0.1.0~dev", "20240101"},
		// No tag: the VERSION file's line, not 0.0.0.
		{"5da54b9", "0.1.0~dev", "0.1.0~dev+git21.g5da54b9"},
		{"5da54b9", "0.1.0~dev\n", "0.1.0~dev+git21.g5da54b9"},
		{"1234567", "2.0", "2.0+git21.g1234567"},
		{"5da54b9-dirty", "0.1.0~dev", "0.1.0~dev+git21.g5da54b9.dirty"},
		{"  v2.0.0-0-g1234567\n", "", "2.0.0"},
	} {
		got, err := fromDescribe(c.describe, commits, c.base)
		if err != nil || got != c.want {
			t.Errorf("fromDescribe(%q, %d, %q) = %q, %v; want %q", c.describe, commits, c.base, got, err, c.want)
		}
	}
	for _, bad := range []struct{ describe, base string }{
		{"", "0.1.0~dev"}, {"dev", "0.1.0~dev"}, {"v1.2.3", "0.1.0~dev"}, {"release-x-0-g1234567", "0.1.0~dev"},
		{"v-0-g1234567", "0.1.0~dev"},
		// No tag and no usable VERSION file.
		{"5da54b9", ""}, {"5da54b9", "0.1.0-dev"}, {"5da54b9", "v0.1.0"},
	} {
		if got, err := fromDescribe(bad.describe, commits, bad.base); err == nil {
			t.Errorf("fromDescribe(%q, %d, %q) = %q, want an error", bad.describe, commits, bad.base, got)
		}
	}
	if got, err := fromDescribe("5da54b9", 0, "0.1.0~dev"); err == nil {
		t.Errorf("fromDescribe with no commit count = %q, want an error", got)
	}
}

// A build system's build of one commit: the VERSION file's and the hash's
// first 12 digits.
func TestFromCommit(t *testing.T) {
	for _, c := range []struct{ base, commit, want string }{
		{"0.1.0~dev", "d4fcd5d9ea5fa83d6eabc4fec141285e9c0ee0b9", "0.1.0~dev+gd4fcd5d9ea5f"},
		{"0.1.0~dev\n", "D4FCD5D9EA5FA83D6EABC4FEC141285E9C0EE0B9", "0.1.0~dev+gd4fcd5d9ea5f"},
		{"1.4.0", "44501c0a1b2c", "1.4.0+g44501c0a1b2c"},
		{"2.0~rc1", " 44501c0a1b2c3d\n", "2.0~rc1+g44501c0a1b2c"},
	} {
		got, err := fromCommit(c.base, c.commit)
		if err != nil || got != c.want {
			t.Errorf("fromCommit(%q, %q) = %q, %v; want %q", c.base, c.commit, got, err, c.want)
		}
	}
	for _, bad := range []struct{ base, commit string }{
		{"0.1.0~dev", "44501c0"},               // shorter than the 12 digits kept
		{"0.1.0~dev", "AUTOINC"},               // Yocto's SRCREV with AUTOREV, unresolved
		{"0.1.0~dev", "v1.2.3"},                // a tag is not a commit
		{"0.1.0~dev", strings.Repeat("a", 41)}, // longer than SHA-1
		{"", "d4fcd5d9ea5fa83d6eabc4fec141285e9c0ee0b9"},
		{"0.1.0-dev", "d4fcd5d9ea5fa83d6eabc4fec141285e9c0ee0b9"},
	} {
		if got, err := fromCommit(bad.base, bad.commit); err == nil {
			t.Errorf("fromCommit(%q, %q) = %q, want an error", bad.base, bad.commit, got)
		}
	}
}

// dpkg itself agrees that the mapping keeps git order: the untagged commits
// leading to a release (VERSION 0.1.0~dev) sort before its release
// candidate and the release, and later commits after it.
func TestVersionsSortLikeGit(t *testing.T) {
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Skip("missing tool dpkg (apt-get install dpkg)")
	}
	const base = "0.1.0~dev"
	order := []struct {
		describe string
		commits  int
	}{
		{"fffffff", 99}, {"abcdef0", 100}, {"v0.1.0-rc1-0-g1234567", 101}, {"v0.1.0-rc1-2-g1234567", 103},
		{"v0.1.0-0-g1234567", 104}, {"v0.1.0-1-gabcdef0", 105}, {"v0.1.1-0-g1234567", 110},
	}
	prev := ""
	for _, o := range order {
		v, err := fromDescribe(o.describe, o.commits, base)
		if err != nil {
			t.Fatal(err)
		}
		if prev != "" {
			if out, err := exec.Command(dpkg, "--compare-versions", prev, "lt", v).CombinedOutput(); err != nil {
				t.Errorf("dpkg: %s is not below %s (%s %v)", prev, v, strings.TrimSpace(string(out)), err)
			}
		}
		prev = v
	}
	// A build system's build of a commit on the same line sorts there too.
	c, err := fromCommit(base, "d4fcd5d9ea5fa83d6eabc4fec141285e9c0ee0b9")
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"0.1.0~rc1", "0.1.0"} {
		if out, err := exec.Command(dpkg, "--compare-versions", c, "lt", rel).CombinedOutput(); err != nil {
			t.Errorf("dpkg: %s is not below %s (%s %v)", c, rel, strings.TrimSpace(string(out)), err)
		}
	}
}

// A release tarball has no .git: the VERSION file says, and a bad one is
// refused with what is wrong.
func TestVersionWithoutGit(t *testing.T) {
	dir := t.TempDir()
	if _, err := version(dir, ""); err == nil || !strings.Contains(err.Error(), "VERSION") {
		t.Errorf("no .git, no VERSION: %v, want an error naming VERSION", err)
	}
	for _, c := range []struct{ file, want string }{{"1.4.0\n", "1.4.0"}, {"2.0~rc1", "2.0~rc1"}, {"1.4.0-1\n", ""}, {"v1.4\n", ""}} {
		os.WriteFile(filepath.Join(dir, "VERSION"), []byte(c.file), 0o644)
		got, err := version(dir, "")
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("VERSION %q: %q, %v; want %q", c.file, got, err, c.want)
		}
		// The same tarball built by a build system that names the commit.
		if c.want != "" {
			got, err := version(dir, "44501c0a1b2c3d4e5f60718293a4b5c6d7e8f901")
			if want := c.want + "+g44501c0a1b2c"; got != want || err != nil {
				t.Errorf("VERSION %q, -commit: %q, %v; want %q", c.file, got, err, want)
			}
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
	f.Add("v1.2.3-4-gabcdef0-dirty", 3, "0.1.0~dev")
	f.Add("5da54b9", 21, "0.1.0~dev")
	f.Fuzz(func(t *testing.T, describe string, commits int, base string) {
		v, err := fromDescribe(describe, commits, base)
		if err != nil {
			return
		}
		if !nativeVersion.MatchString(v) {
			t.Fatalf("fromDescribe(%q) = %q: not a Debian version", describe, v)
		}
	})
}

// A checkout: no tag gives the VERSION file's line with the commit count
// and hash; a tag gives the tag's; -commit (a build system's) gives the
// VERSION file's and the hash, whatever git says.
func TestVersionInACheckout(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("missing tool git")
	}
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gitBin, append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(file string) string {
		t.Helper()
		os.WriteFile(filepath.Join(dir, file), []byte(file), 0o644)
		run("add", file)
		run("commit", "-q", "-m", file)
		return run("rev-parse", "HEAD")
	}
	run("init", "-q")
	os.WriteFile(filepath.Join(dir, "VERSION"), []byte("0.1.0~dev\n"), 0o644)
	run("add", "VERSION")
	commit("a")
	head := commit("b")
	short := run("rev-parse", "--short", "HEAD")
	steps := []struct {
		what, commit, want string
	}{
		{"no tag", "", "0.1.0~dev+git2.g" + short},
		{"no tag, -commit", head, "0.1.0~dev+g" + head[:12]},
	}
	for _, s := range steps {
		if got, err := version(dir, s.commit); got != s.want || err != nil {
			t.Errorf("%s: %q, %v; want %q", s.what, got, err, s.want)
		}
	}
	run("tag", "-a", "-m", "v0.1.0", "v0.1.0")
	next := commit("c")
	steps = []struct {
		what, commit, want string
	}{
		{"a commit past v0.1.0", "", "0.1.0+git1.g" + run("rev-parse", "--short", "HEAD")},
		{"past v0.1.0, -commit", next, "0.1.0~dev+g" + next[:12]},
	}
	for _, s := range steps {
		if got, err := version(dir, s.commit); got != s.want || err != nil {
			t.Errorf("%s: %q, %v; want %q", s.what, got, err, s.want)
		}
	}
	// No tag and no VERSION file: an error, not 0.0.0.
	run("tag", "-d", "v0.1.0")
	run("rm", "-q", "VERSION")
	run("commit", "-q", "-m", "no VERSION")
	if got, err := version(dir, ""); err == nil || !strings.Contains(err.Error(), "VERSION") {
		t.Errorf("no tag, no VERSION file: %q, %v; want an error naming VERSION", got, err)
	}
}

// The contract (docs/contract/packaging.md) shows what this program gives,
// and its ordering example is dpkg's.
func TestContractShowsTheRule(t *testing.T) {
	page, err := os.ReadFile("../../docs/contract/packaging.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(page)), " ")
	vfile, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSpace(string(vfile))
	want := []string{"`" + base + "`"}
	for _, c := range []struct {
		describe string
		commits  int
	}{
		{"v1.2.3-0-gabcdef0", 1}, {"v1.2.3-4-gabcdef0", 1}, {"v1.3.0-rc1-0-g1234567", 1},
		{"v1.3.0-rc1-2-g1234567", 1}, {"44501c0", 615},
	} {
		v, err := fromDescribe(c.describe, c.commits, base)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, "`"+v+"`")
	}
	v, err := fromCommit(base, "d4fcd5d9ea5fa83d6eabc4fec141285e9c0ee0b9")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, "`"+v+"`", "-commit HASH")
	for _, w := range want {
		if !strings.Contains(doc, w) {
			t.Errorf("docs/contract/packaging.md does not show %s", w)
		}
	}
	m := regexp.MustCompile("were made along a line: (`[^.]*(?:\\.[^ ][^.]*)*`)\\. ").FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("docs/contract/packaging.md: no ordering example (\"were made along a line: `a` < `b` ...\")")
	}
	var chain []string
	for _, v := range strings.Split(m[1], "<") {
		chain = append(chain, strings.Trim(strings.TrimSpace(v), "`"))
	}
	if len(chain) < 4 {
		t.Fatalf("ordering example %q: too short", m[1])
	}
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Skip("missing tool dpkg (apt-get install dpkg)")
	}
	for i := 1; i < len(chain); i++ {
		if _, err := Check(chain[i]); err != nil {
			t.Error(err)
		}
		if out, err := exec.Command(dpkg, "--compare-versions", chain[i-1], "lt", chain[i]).CombinedOutput(); err != nil {
			t.Errorf("docs/contract/packaging.md: %s < %s, which dpkg denies (%s %v)", chain[i-1], chain[i], strings.TrimSpace(string(out)), err)
		}
	}
}
