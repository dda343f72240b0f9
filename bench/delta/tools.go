package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/otad/otad/internal/testkit/testtool"
)

// tool is a program the bench runs and the Debian package that has it.
type tool struct{ name, pkg string }

var (
	toolDebootstrap = tool{"debootstrap", "debootstrap"}
	toolMkfsExt4    = tool{"mkfs.ext4", "e2fsprogs"}
	toolMksquashfs  = tool{"mksquashfs", "squashfs-tools"}
	toolMkfsErofs   = tool{"mkfs.erofs", "erofs-utils"}
	toolXdelta3     = tool{"xdelta3", "xdelta3"}
	toolCasync      = tool{"casync", "casync"}
	toolZstd        = tool{"zstd", "zstd"}
	toolDpkgQuery   = tool{"dpkg-query", "dpkg"}
)

// missingTools names the tools not on PATH and the apt-get line that
// installs them; "" when all are there.
func missingTools(tools []tool, look func(string) (string, error)) string {
	var names, pkgs []string
	for _, t := range tools {
		if _, err := look(t.name); err != nil {
			names = append(names, t.name)
			if !slices.Contains(pkgs, t.pkg) {
				pkgs = append(pkgs, t.pkg)
			}
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("%s not found: apt-get install %s (scripts/deps/apt.txt lists them; `make deps` installs them all)",
		strings.Join(names, ", "), strings.Join(pkgs, " "))
}

var lookPath = exec.LookPath

// runner runs the tools, logging each command and its output to log (the
// build log in the cache) and keeping the end of the output for an error.
type runner struct {
	log io.Writer
}

// run runs name with args; a failure carries the command and the end of
// its output. Every tool is bounded by limit.
func (r runner) run(ctx context.Context, limit time.Duration, name string, args ...string) error {
	_, err := r.output(ctx, limit, nil, name, args...)
	return err
}

// output is run with stdout going to stdout (when set) instead of the log.
func (r runner) output(ctx context.Context, limit time.Duration, stdout io.Writer, name string, args ...string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	fmt.Fprintf(r.log, "+ %s %s\n", name, strings.Join(args, " "))
	tail := &testtool.Buffer{Max: 3000}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = io.MultiWriter(r.log, tail)
	cmd.Stdout = cmd.Stderr
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if ctx.Err() == context.DeadlineExceeded {
		return took, fmt.Errorf("%s %s: no end after %v", name, strings.Join(args, " "), limit)
	}
	if err != nil {
		return took, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, strings.TrimSpace(tail.String()))
	}
	return took, nil
}
