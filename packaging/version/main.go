// Command version prints otad's version, the one string the three binaries
// carry (-ldflags -X main.version) and the .deb is versioned with (make
// deb): from git when the tree is a checkout (`git describe`), else from the
// VERSION file at the root (a release tarball has no .git).
//
//	go run ./packaging/version [-root DIR]
//
// The Makefile runs it once; `make VERSION=1.2.3 deb` skips it.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	root := flag.String("root", ".", "the repository (or unpacked tarball) root")
	flag.Parse()
	v, err := version(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "version:", err)
		os.Exit(1)
	}
	fmt.Println(v)
}

// version is git's when root is a checkout, else the VERSION file's.
func version(root string) (string, error) {
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
		return fromDescribe(describe, n)
	}
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return "", fmt.Errorf("not a git checkout, and no version file: %w (or set VERSION=)", err)
	}
	return Check(strings.TrimSpace(string(b)))
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
