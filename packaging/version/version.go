package main

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	// git describe --long: TAG-N-gHASH.
	describeAfterTag = regexp.MustCompile(`^(.+)-([0-9]+)-g([0-9a-f]{4,40})$`)
	// git describe --always with no tag reachable: the abbreviated hash.
	describeHashOnly = regexp.MustCompile(`^[0-9a-f]{7,40}$`)
	// A commit a build system names (-commit): Buildroot's OTAD_VERSION,
	// Yocto's SRCREV; at least as long as the part of it the version keeps.
	commitHash = regexp.MustCompile(`^[0-9a-fA-F]{12,40}$`)
	// Debian policy 5.6.12: the version of a native package (no revision,
	// so no hyphen); the binaries print the same string.
	nativeVersion = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`)
)

// commitDigits is how much of the commit hash a build from a tree without
// history (-commit) keeps: git describe's length varies with the
// repository's size, a tarball has no repository to size.
const commitDigits = 12

// fromDescribe maps `git describe --tags --long --always --dirty` to a
// version that sorts, for dpkg, the way the commits were made: a
// pre-release tag's hyphen becomes ~ (1.2.0~rc1 < 1.2.0), commits past a tag
// become +gitN.gHASH, and a tree with no tag is base+gitN.gHASH, base being
// the VERSION file's (0.1.0~dev: before the release it leads to) and N the
// commit count. --long keeps a tag made of digits apart from a bare hash.
func fromDescribe(describe string, commits int, base string) (string, error) {
	d := strings.TrimSpace(describe)
	dirty := strings.HasSuffix(d, "-dirty")
	d = strings.TrimSuffix(d, "-dirty")
	var v string
	switch m := describeAfterTag.FindStringSubmatch(d); {
	case m != nil && m[2] == "0":
		v = tagVersion(m[1])
	case m != nil:
		v = tagVersion(m[1]) + "+git" + m[2] + ".g" + m[3]
	case describeHashOnly.MatchString(d) && commits > 0:
		if strings.TrimSpace(base) == "" {
			return "", fmt.Errorf("git describe %q: no tag reachable, and no VERSION file to say the release line (or set VERSION=)", describe)
		}
		b, err := Check(strings.TrimSpace(base))
		if err != nil {
			return "", fmt.Errorf("no tag reachable, and the VERSION file's: %w", err)
		}
		v = fmt.Sprintf("%s+git%d.g%s", b, commits, d)
	default:
		return "", fmt.Errorf("%q: not the output of git describe --tags --long --always (with the commit count)", describe)
	}
	if dirty {
		v += ".dirty"
		if !strings.Contains(v, "+") {
			v = strings.TrimSuffix(v, ".dirty") + "+dirty"
		}
	}
	if _, err := Check(v); err != nil {
		return "", fmt.Errorf("%w (from git describe %q); tag releases as vX.Y.Z", err, describe)
	}
	return v, nil
}

// fromCommit is the version of a build from a tree without history (a
// build system's tarball or fetch of one commit): the VERSION file's, then
// +g and the commit's first 12 hex digits. No commit count: a tarball
// cannot say how many commits led to it.
func fromCommit(base, commit string) (string, error) {
	b, err := Check(strings.TrimSpace(base))
	if err != nil {
		return "", fmt.Errorf("the VERSION file's: %w", err)
	}
	c := strings.TrimSpace(commit)
	if !commitHash.MatchString(c) {
		return "", fmt.Errorf("-commit %q: not a commit hash (%d to 40 hex digits)", commit, commitDigits)
	}
	return Check(b + "+g" + strings.ToLower(c[:commitDigits]))
}

// Check accepts v when it can be both the binaries' version and the .deb's.
func Check(v string) (string, error) {
	if !nativeVersion.MatchString(v) {
		return "", fmt.Errorf("version %q: not a Debian version (a digit first, then letters, digits and . + ~; no hyphen)", v)
	}
	return v, nil
}

// tagVersion drops a leading v and turns pre-release hyphens into ~.
func tagVersion(tag string) string {
	t := tag
	if len(t) > 1 && (t[0] == 'v' || t[0] == 'V') && t[1] >= '0' && t[1] <= '9' {
		t = t[1:]
	}
	return strings.ReplaceAll(t, "-", "~")
}
