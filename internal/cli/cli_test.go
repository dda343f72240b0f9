package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

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
			"ok":      {"succeeds", run(nil)},
			"fail":    {"fails", run(errors.New("broken"))},
			"refuse":  {"refuses", run(errRefused)},
			"misused": {"a usage error", run(Usagef("--x: bad"))},
		},
		Notes: []string{"Exit codes: 0 ok."},
		Code: func(err error) int {
			if errors.Is(err, errRefused) {
				return 3
			}
			return ota.ExitFailure
		},
	}
}

func TestProgramRun(t *testing.T) {
	tests := []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{nil, ota.ExitUsage, "", "usage: tool COMMAND"},
		{[]string{"help"}, ota.ExitOK, "  refuse   refuses", ""},
		{[]string{"help"}, ota.ExitOK, "Exit codes: 0 ok.", ""},
		{[]string{"help", "ok"}, ota.ExitOK, "usage: tool do", ""},
		{[]string{"ok", "-h"}, ota.ExitOK, "usage: tool do", ""},
		{[]string{"ok", "--help"}, ota.ExitOK, "usage: tool do", ""},
		{[]string{"ok"}, ota.ExitOK, "", ""},
		{[]string{"nope"}, ota.ExitUsage, "", `tool: unknown command "nope"`},
		{[]string{"fail"}, ota.ExitFailure, "", "tool fail: broken"},
		{[]string{"refuse"}, 3, "", "tool refuse: refused"},
		{[]string{"misused"}, ota.ExitUsage, "", "Run 'tool misused -h' for usage."},
		{[]string{"ok", "extra"}, ota.ExitUsage, "", "unexpected arguments"},
		{[]string{"ok", "--bad"}, ota.ExitUsage, "", "flag provided but not defined"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := testProgram().Run(context.Background(), tt.args, &stdout, &stderr)
		// Help goes to stdout alone, errors to stderr alone.
		if code != tt.code || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) ||
			(tt.stdout == "") != (stdout.Len() == 0) || (tt.stderr == "") != (stderr.Len() == 0) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
		}
	}
}
