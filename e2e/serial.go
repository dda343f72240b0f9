package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
)

// ErrConsoleClosed means the machine stopped before the awaited line appeared.
var ErrConsoleClosed = errors.New("serial console closed")

// ErrFatalLine means the console printed a line that ends the wait early
// (kernel panic, the init script giving up).
var ErrFatalLine = errors.New("fatal line on the serial console")

// SerialLog collects a machine's serial console: every byte goes to a file
// (kept for the failure report) and complete lines to memory, where Expect
// reads them in order.
type SerialLog struct {
	mu      sync.Mutex
	file    *os.File
	lines   []string
	partial []byte
	closed  bool
	changed chan struct{} // closed and replaced on every new line or Close
	cursor  int           // next line Expect looks at
	fatal   []*regexp.Regexp
}

// NewSerialLog writes the console to path. Lines matching a fatal pattern end
// any Expect with ErrFatalLine.
func NewSerialLog(path string, fatal ...*regexp.Regexp) (*SerialLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &SerialLog{file: f, changed: make(chan struct{}), fatal: fatal}, nil
}

// Path is the log file.
func (l *SerialLog) Path() string { return l.file.Name() }

// Write takes console output; it never fails the machine.
func (l *SerialLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.file.Write(p)
	l.partial = append(l.partial, p...)
	grew := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, cleanLine(l.partial[:i]))
		l.partial = l.partial[i+1:]
		grew = true
	}
	if grew {
		l.notify()
	}
	return len(p), nil
}

// cleanLine drops carriage returns and terminal escape sequences (OVMF and
// GRUB draw with them) so patterns match the text.
func cleanLine(b []byte) string {
	var out strings.Builder
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == 0x1b:
			// CSI: ESC [ params final-byte
			if i+1 < len(b) && b[i+1] == '[' {
				i += 2
				for i < len(b) && (b[i] < 0x40 || b[i] > 0x7e) {
					i++
				}
			}
		case c == '\r' || c == 0:
		default:
			out.WriteByte(c)
		}
	}
	return out.String()
}

func (l *SerialLog) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Close ends the log: a pending partial line becomes a line, and waits end.
func (l *SerialLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	if len(l.partial) > 0 {
		l.lines = append(l.lines, cleanLine(l.partial))
		l.partial = nil
	}
	l.closed = true
	l.notify()
	return l.file.Close()
}

// Expect waits for the next line matching re, after the last line an Expect
// returned, and returns it. It fails on ctx's end, a fatal line, or the log's
// close, naming what it waited for.
func (l *SerialLog) Expect(ctx context.Context, re *regexp.Regexp) (string, error) {
	for {
		l.mu.Lock()
		for ; l.cursor < len(l.lines); l.cursor++ {
			line := l.lines[l.cursor]
			if re.MatchString(line) {
				l.cursor++
				l.mu.Unlock()
				return line, nil
			}
			for _, f := range l.fatal {
				if f.MatchString(line) {
					l.cursor++
					l.mu.Unlock()
					return line, fmt.Errorf("waiting for %q: %w: %s", re, ErrFatalLine, line)
				}
			}
		}
		closed, changed := l.closed, l.changed
		l.mu.Unlock()
		if closed {
			return "", fmt.Errorf("waiting for %q: %w", re, ErrConsoleClosed)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for %q: %w", re, ctx.Err())
		case <-changed:
		}
	}
}

// Lines returns a copy of the complete lines so far.
func (l *SerialLog) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// Tail returns the last n lines joined, for failure reports.
func (l *SerialLog) Tail(n int) string {
	lines := l.Lines()
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
