package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Deb is otad's package (the device's) as make deb builds it, for one architecture.
type Deb struct {
	Path    string
	Version string // the package's and the binaries' (packaging/version)
}

// BuildDeb builds the device's package the way make deb does, into out: the
// version from packaging/version, otad with it (-X main.version, static), its
// man page and completions (packaging/gendocs), then packaging/mkdeb with the
// recipe as shipped (packaging/otad.yaml). goBin is the go command.
func BuildDeb(ctx context.Context, goBin, repo, arch, out string) (Deb, error) {
	gorun := func(env []string, dir string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(string(b)), nil
	}
	version, err := gorun(nil, repo, "run", "./packaging/version")
	if err != nil {
		return Deb{}, err
	}
	bin := filepath.Join(out, "bin")
	goarch := map[string][]string{"amd64": {"GOARCH=amd64"}, "arm64": {"GOARCH=arm64"}, "armhf": {"GOARCH=arm", "GOARM=7"}}[arch]
	if goarch == nil {
		return Deb{}, fmt.Errorf("architecture %q: not amd64, arm64 or armhf", arch)
	}
	env := append([]string{"CGO_ENABLED=0", "GOOS=linux"}, goarch...)
	for _, c := range []string{"otad"} {
		if _, err := gorun(env, repo, "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", filepath.Join(bin, c), "./cmd/"+c); err != nil {
			return Deb{}, err
		}
	}
	docs := filepath.Join(out, "docs")
	if _, err := gorun(nil, repo, "run", "./packaging/gendocs", "-out", docs, "-version", version); err != nil {
		return Deb{}, err
	}
	dist := filepath.Join(out, "dist")
	path, err := gorun(nil, filepath.Join(repo, "packaging", "mkdeb"), "run", ".", "-root", repo, "-config", "packaging/otad.yaml",
		"-arch", arch, "-bin", bin, "-docs", docs, "-version", version, "-out", dist)
	if err != nil {
		return Deb{}, err
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(repo, path)
	}
	return Deb{Path: path, Version: version}, nil
}
