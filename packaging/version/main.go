// Command version prints otad's version, the one string the three binaries
// carry (-ldflags -X main.version) and the .deb is versioned with (make
// deb).
//
//	go run ./packaging/version [-root DIR] [-commit HASH]
//
// The rule (docs/contract/packaging.md):
//
//   - a git checkout: the latest tag reachable (v1.2.3: 1.2.3, later
//     commits 1.2.3+gitN.gHASH), else the VERSION file's, the commit count
//     and hash (0.1.0~dev+git615.g44501c0);
//   - a release tarball (no .git): the VERSION file's (0.1.0~dev);
//   - a build system's build of one commit (Buildroot, Yocto: -commit
//     HASH, the hash it fetched): the VERSION file's and the hash's first
//     12 digits (0.1.0~dev+g44501c0a1b2), whether or not there is a .git.
//
// The Makefile runs it once; `make VERSION=1.2.3 deb` skips it.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	root := flag.String("root", ".", "the repository (or unpacked tarball) root")
	commit := flag.String("commit", "", "the commit a build system fetched (Buildroot's OTAD_VERSION, Yocto's SRCREV): the VERSION file's version and this hash, git or not")
	flag.Parse()
	v, err := version(*root, *commit)
	if err != nil {
		fmt.Fprintln(os.Stderr, "version:", err)
		os.Exit(1)
	}
	fmt.Println(v)
}

// version is the build system's commit's when commit is set, else git's
// when root is a checkout, else the VERSION file's.
func version(root, commit string) (string, error) {
	base, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if commit != "" {
		if err != nil {
			return "", fmt.Errorf("-commit %s: no VERSION file: %w", commit, err)
		}
		return fromCommit(string(base), commit)
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err == nil {
		describe, err := git(root, "describe", "--tags", "--long", "--always", "--dirty")
		if err != nil {
			return "", err
		}
		count, err := git(root, "rev-list", "--count", "HEAD")
		if err != nil {
			return "", err
		}
		n, err := strconv.Atoi(count)
		if err != nil {
			return "", fmt.Errorf("git rev-list --count HEAD: %q: %w", count, err)
		}
		return fromDescribe(describe, n, string(base))
	}
	if err != nil {
		return "", fmt.Errorf("not a git checkout, and no version file: %w (or set VERSION=)", err)
	}
	return Check(strings.TrimSpace(string(base)))
}

func git(root string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out)), nil
}
