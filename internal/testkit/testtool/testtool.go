// Package testtool finds the Debian tools that integration tests (and the
// benchmarks) run for real: a missing tool fails the test under CI (which
// must install it) and skips it elsewhere, naming the package to install.
// Sh runs a shell script as the tests' stand-in for a bootloader; WriteFile
// writes a test's input file. Buffer collects a process's output while it
// runs.
package testtool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Find returns the path of tool; the error names the package to install.
func Find(tool, aptPackage string) (string, error) {
	if p, err := exec.LookPath(tool); err == nil {
		return p, nil
	}
	// Debian puts daemons (mosquitto) and disk tools (sgdisk, mkfs.*) in the
	// sbin directories, which are not on every user's PATH.
	for _, dir := range []string{"/usr/sbin/", "/sbin/"} {
		if st, err := os.Stat(dir + tool); err == nil && !st.IsDir() {
			return dir + tool, nil
		}
	}
	// `make test` lists the tests skipped with this wording, and the install
	// command, at its end (internal/testkit/testreport).
	return "", errors.New(Missing(tool, aptPackage))
}

// Require returns the path of tool, or ends the test.
func Require(t testing.TB, tool, aptPackage string) string {
	t.Helper()
	p, err := Find(tool, aptPackage)
	switch {
	case err == nil:
		return p
	case os.Getenv("CI") != "":
		t.Fatal(err)
	default:
		t.Skip(err)
	}
	return ""
}

// Missing is the skip (or, under CI, failure) message for a tool that is not
// installed.
func Missing(tool, aptPackage string) string {
	return fmt.Sprintf("missing tool %s (apt-get install %s)", tool, aptPackage)
}

// WriteFile writes data to path (mode 0644) and returns path; a failure ends
// the test.
func WriteFile(t testing.TB, path string, data []byte) string {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Sh runs file with /bin/sh, PATH=/usr/bin:/bin and env (KEY=value) as its
// whole environment, for at most 10 s, and returns its standard output; a
// failure ends the test with both outputs.
func Sh(t testing.TB, file string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", file)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sh %s: %v\nstdout:\n%s\nstderr:\n%s", file, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// WaitListening waits until a server of the test's own, started as cmd, takes
// TCP connections on 127.0.0.1:port, at most timeout and while ctx lasts. done
// closed first means it exited; the errors name it and quote out, its output.
func WaitListening(ctx context.Context, cmd *exec.Cmd, done <-chan struct{}, port int, timeout time.Duration, out fmt.Stringer) error {
	name := filepath.Base(cmd.Path)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for {
		if c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited at start (%v): %s", name, cmd.ProcessState, out)
		case <-ctx.Done():
			return fmt.Errorf("%s not listening on %s after %v: %s", name, addr, timeout, out)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Buffer is a bytes.Buffer safe for one writer goroutine (a process's
// output, a watch loop) while another reads it.
type Buffer struct {
	// Max, when set, keeps only the last Max bytes (a long-running
	// process's log tail).
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Write(p)
	if over := s.b.Len() - s.Max; s.Max > 0 && over > 0 {
		s.b.Next(over)
	}
	return len(p), nil
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StopAtEnd stops a test's server (a broker) when the test ends, and prints
// its log, named what, if the test failed.
func StopAtEnd(t testing.TB, what string, stop func(), log func() string) {
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s log:\n%s", what, log())
		}
	})
}
