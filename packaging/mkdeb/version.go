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
	// Debian policy 5.6.12, upstream_version when a revision follows.
	debianUpstream = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~-]*$`)
)

// debVersion maps `git describe --tags --long --always --dirty` to a Debian
// version that sorts the way the commits were made: a pre-release tag's
// hyphen becomes ~ (1.2.0~rc1 < 1.2.0), commits past a tag become
// +gitN.gHASH, and a tree with no tag is 0.0.0+gitN.gHASH, N being the commit
// count. --long keeps a tag made of digits apart from a bare hash. The Debian
// revision is always -1: lintian then expects changelog.Debian.gz, which the
// package has.
func debVersion(describe string, commits int) (string, error) {
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
		v = fmt.Sprintf("0.0.0+git%d.g%s", commits, d)
	default:
		return "", fmt.Errorf("%q: not the output of git describe --tags --long --always (with the commit count)", describe)
	}
	if dirty {
		v += ".dirty"
		if !strings.Contains(v, "+") {
			v = strings.TrimSuffix(v, ".dirty") + "+dirty"
		}
	}
	if !debianUpstream.MatchString(v) || strings.Contains(v, "-") {
		return "", fmt.Errorf("version %q (from git describe %q): not a Debian upstream version; tag releases as vX.Y.Z", v, describe)
	}
	return v + "-1", nil
}

// tagVersion drops a leading v and turns pre-release hyphens into ~.
func tagVersion(tag string) string {
	t := tag
	if len(t) > 1 && (t[0] == 'v' || t[0] == 'V') && t[1] >= '0' && t[1] <= '9' {
		t = t[1:]
	}
	return strings.ReplaceAll(t, "-", "~")
}
