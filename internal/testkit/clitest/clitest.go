// Package clitest checks the command lines of the programs built on
// internal/cli (otad, otactl, otasim): the exit code, and what stdout and
// stderr say — help on stdout alone, errors on stderr alone.
package clitest

import (
	"strings"
	"testing"
)

// Case is a command line and what it must give: the exit code, and text that
// stdout and stderr contain ("" means the stream stays empty).
type Case struct {
	Args           []string
	Code           int
	Stdout, Stderr string
}

// Run runs every case through run and reports each that gives anything else.
func Run(t *testing.T, run func(args ...string) (code int, stdout, stderr string), cases []Case) {
	t.Helper()
	for _, c := range cases {
		code, stdout, stderr := run(c.Args...)
		if code != c.Code || !strings.Contains(stdout, c.Stdout) || !strings.Contains(stderr, c.Stderr) ||
			(c.Stdout == "") != (stdout == "") || (c.Stderr == "") != (stderr == "") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.Args, code, stdout, stderr, c.Code, c.Stdout, c.Stderr)
		}
	}
}
