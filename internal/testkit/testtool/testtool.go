// Package testtool finds the Debian tools that integration tests run for
// real: a missing tool fails the test under CI (which must install it) and
// skips it elsewhere, naming the package to install.
package testtool

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// Require returns the path of tool, or ends the test.
func Require(t testing.TB, tool, aptPackage string) string {
	t.Helper()
	if p, err := exec.LookPath(tool); err == nil {
		return p
	}
	// Debian puts daemons (mosquitto) in /usr/sbin, not on every user's PATH.
	if _, err := os.Stat("/usr/sbin/" + tool); err == nil {
		return "/usr/sbin/" + tool
	}
	msg := fmt.Sprintf("%s not found: apt-get install %s", tool, aptPackage)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Buffer is a bytes.Buffer safe for one writer goroutine (a process's
// output, a watch loop) while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
