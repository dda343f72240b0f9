package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/clitest"
	"github.com/otad/otad/ota"
)

func TestParse(t *testing.T) {
	tests := []struct {
		args    []string
		pos     []string
		pub     string
		wantErr error
	}{
		{[]string{"FILE", "--pub", "k"}, []string{"FILE"}, "k", nil},
		{[]string{"--pub", "k", "A", "B"}, []string{"A", "B"}, "k", nil},
		{[]string{"A", "--", "--pub", "B"}, []string{"A", "--pub", "B"}, "", nil},
		{[]string{"--nope"}, nil, "", ErrFlagsReported},
	}
	for _, tt := range tests {
		fs := NewFlagSet("prog cmd", "FILE", io.Discard)
		pub := fs.String("pub", "", "")
		pos, err := Parse(fs, tt.args)
		if !errors.Is(err, tt.wantErr) || (err == nil && (!reflect.DeepEqual(pos, tt.pos) || *pub != tt.pub)) {
			t.Errorf("%q: positional %q, --pub %q, err %v; want %q, %q, %v", tt.args, pos, *pub, err, tt.pos, tt.pub, tt.wantErr)
		}
	}
	fs := NewFlagSet("prog cmd", "", io.Discard)
	if err := ParseNone(fs, []string{"x"}); !errors.As(err, new(UsageError)) || !strings.Contains(err.Error(), "unexpected arguments") {
		t.Errorf("ParseNone with an argument: %v", err)
	}
}

func TestStringList(t *testing.T) {
	var l StringList
	for _, v := range []string{"a", "b"} {
		if err := l.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if l.Set("") == nil || l.String() != "a,b" {
		t.Fatalf("%q", l)
	}
}

var errRefused = errors.New("refused")

func testProgram() Program {
	run := func(err error) func(context.Context, []string, io.Writer, io.Writer) error {
		return func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			fs := NewFlagSet("tool do", "", stderr)
			if err := ParseNone(fs, args); err != nil {
				return err
			}
			return err
		}
	}
	return Program{
		Name: "tool",
		Commands: map[string]Command{
			"ok":      {Summary: "succeeds", Run: run(nil)},
			"fail":    {Summary: "fails", Run: run(errors.New("broken"))},
			"refuse":  {Summary: "refuses", Run: run(errRefused)},
			"misused": {Summary: "a usage error", Run: run(Usagef("--x: bad"))},
		},
		Notes:   []string{"Exit codes: 0 ok."},
		Version: "1.2.3+git4.gabcdef0",
		Code: func(err error) int {
			if errors.Is(err, errRefused) {
				return 3
			}
			return ota.ExitFailure
		},
	}
}

func TestProgramRun(t *testing.T) {
	clitest.Run(t, func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := testProgram().Run(context.Background(), args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}, []clitest.Case{
		{Code: ota.ExitUsage, Stderr: "usage: tool COMMAND"},
		{Args: []string{"help"}, Stdout: "  refuse   refuses"},
		{Args: []string{"help"}, Stdout: "Exit codes: 0 ok."},
		{Args: []string{"help", "ok"}, Stdout: "usage: tool do"},
		{Args: []string{"ok", "-h"}, Stdout: "usage: tool do"},
		{Args: []string{"ok", "--help"}, Stdout: "usage: tool do"},
		{Args: []string{"ok"}},
		{Args: []string{"nope"}, Code: ota.ExitUsage, Stderr: `tool: unknown command "nope"`},
		{Args: []string{"fail"}, Code: ota.ExitFailure, Stderr: "tool fail: broken"},
		{Args: []string{"refuse"}, Code: 3, Stderr: "tool refuse: refused"},
		{Args: []string{"misused"}, Code: ota.ExitUsage, Stderr: "Run 'tool misused -h' for usage."},
		{Args: []string{"ok", "extra"}, Code: ota.ExitUsage, Stderr: "unexpected arguments"},
		{Args: []string{"ok", "--bad"}, Code: ota.ExitUsage, Stderr: "flag provided but not defined"},
		{Args: []string{"--version"}, Stdout: "tool 1.2.3+git4.gabcdef0\n"},
		{Args: []string{"-version"}, Stdout: "tool 1.2.3+git4.gabcdef0\n"},
		{Args: []string{"version"}, Stdout: "tool 1.2.3+git4.gabcdef0\n"},
		{Args: []string{"version", "-h"}, Stdout: "usage: tool version"},
		{Args: []string{"version", "x"}, Code: ota.ExitUsage, Stderr: "unexpected arguments"},
		{Args: []string{"help"}, Stdout: "  version  print the version"},
	})
	// Without a version there is no such command.
	p := testProgram()
	p.Version = ""
	var stdout, stderr bytes.Buffer
	if code := p.Run(context.Background(), []string{"--version"}, &stdout, &stderr); code != ota.ExitUsage || !strings.Contains(stderr.String(), "unknown command") {
		t.Errorf("--version without a version: exit %d: %s", code, stderr.String())
	}
}

func TestBuildVersion(t *testing.T) {
	if got := BuildVersion("1.2.3"); got != "1.2.3" {
		t.Errorf("BuildVersion(1.2.3) = %q", got)
	}
	// A test binary has no module version of its own.
	if got := BuildVersion(""); got != "devel" {
		t.Errorf("BuildVersion(\"\") = %q, want devel", got)
	}
}

func TestWordSet(t *testing.T) {
	for _, c := range []struct {
		synopsis string
		want     []string
	}{
		{"[-c FILE] [-v] [flags] booted|other", []string{"booted", "other"}},
		{"bash|zsh|fish", []string{"bash", "zsh", "fish"}},
		{"[--type ecdsa-p256|ed25519|rsa-3072] NAME", nil},
		{"--broker URL [--json | --watch] NAME", nil},
		{"[--json] FILE", nil},
		{"check", nil},
		{"", nil},
	} {
		if got := WordSet(c.synopsis); !slices.Equal(got, c.want) {
			t.Errorf("WordSet(%q) = %q, want %q", c.synopsis, got, c.want)
		}
	}
}
