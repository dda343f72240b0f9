// Command testreport reads `go test -json` on stdin and prints what plain
// `go test` prints (package lines, build errors, the output of failing
// tests), then every skipped test with its reason and, for the tests skipped
// for a missing tool (testtool.Missing), the command that installs them all.
// It exits 1 if a test or a package failed. `make test` pipes into it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

func main() {
	r := newReport(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		r.line(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport: reading go test -json:", err)
		os.Exit(1)
	}
	if !r.summary() {
		os.Exit(1)
	}
}

// event is one line of test2json (go doc test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type skip struct{ pkg, test, reason string }

type report struct {
	out                      io.Writer
	running                  map[string][]string // output of each running test, by package+test
	skips                    []skip
	passed, failed, pkgFails int
}

func newReport(out io.Writer) *report {
	return &report{out: out, running: map[string][]string{}}
}

// missing matches testtool.Missing's wording.
var missing = regexp.MustCompile(`missing tool (\S+) \(apt-get install ([^)]+)\)`)

func (r *report) line(b []byte) {
	var e event
	if json.Unmarshal(b, &e) != nil || e.Action == "" {
		// Not an event: something go test printed itself.
		fmt.Fprintln(r.out, string(b))
		return
	}
	if e.Test == "" {
		switch {
		case e.Action == "build-output", e.Action == "output" && e.Output != "PASS\n":
			fmt.Fprint(r.out, e.Output)
		case e.Action == "fail", e.Action == "build-fail":
			r.pkgFails++
		}
		return
	}
	key := e.Package + " " + e.Test
	switch e.Action {
	case "output":
		if !strings.HasPrefix(e.Output, "=== ") {
			r.running[key] = append(r.running[key], e.Output)
		}
	case "pass":
		r.passed++
		delete(r.running, key)
	case "fail":
		r.failed++
		fmt.Fprint(r.out, strings.Join(r.running[key], ""))
		delete(r.running, key)
	case "skip":
		r.skips = append(r.skips, skip{e.Package, e.Test, reason(r.running[key])})
		delete(r.running, key)
	}
}

// reason is the skip message: the test's last log line, without its
// file:line prefix.
func reason(out []string) string {
	for _, l := range slices.Backward(out) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "--- ") {
			continue
		}
		if _, msg, ok := strings.Cut(l, ": "); ok && strings.Contains(l[:len(l)-len(msg)], ".go:") {
			return msg
		}
		return l
	}
	return "(no reason given)"
}

// summary prints the skips and the counts, and says whether all passed.
func (r *report) summary() bool {
	var pkgs []string
	if len(r.skips) > 0 {
		fmt.Fprintln(r.out, "\nskipped:")
	}
	for _, s := range r.skips {
		fmt.Fprintf(r.out, "  %s %s: %s\n", strings.TrimPrefix(s.pkg, "github.com/otad/otad/"), s.test, s.reason)
		if m := missing.FindStringSubmatch(s.reason); m != nil && !slices.Contains(pkgs, m[2]) {
			pkgs = append(pkgs, m[2])
		}
	}
	if len(pkgs) > 0 {
		fmt.Fprintf(r.out, "tests were skipped for missing tools: apt-get install %s (or make deps)\n", strings.Join(pkgs, " "))
	}
	fmt.Fprintf(r.out, "go test: %d passed, %d failed, %d skipped\n", r.passed, r.failed, len(r.skips))
	return r.failed == 0 && r.pkgFails == 0
}
