package device

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/coreos/go-systemd/v22/journal"
)

// otad's one logger (docs/operating.md#systemd-and-logs): key=value lines on
// stderr at the level -v sets, from every part of the process (the agent,
// MQTT, the control socket, the bootloader backends). Under systemd, when
// stderr is the journal stream JOURNAL_STREAM names, each line starts with
// its syslog priority, "<4>" for a warning, which journald takes as the
// entry's priority (`journalctl -p warning -u otad`), and carries no time:
// the journal stamps every entry.

// isJournal reports whether w is the stderr systemd connected to the journal.
func isJournal(w io.Writer) bool {
	if f, ok := w.(*os.File); !ok || f != os.Stderr {
		return false
	}
	ok, err := journal.StderrIsJournalStream()
	return err == nil && ok
}

// newLogger is the process's logger on w at level; journal: w is the
// journal stream.
func newLogger(w io.Writer, level slog.Leveler, onJournal bool) *slog.Logger {
	if !onJournal {
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
	}
	s := &journalSink{out: w}
	inner := slog.NewTextHandler(&s.buf, &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
	return slog.New(journalHandler{inner: inner, sink: s})
}

// journalSink is where every journalHandler derived from one logger writes:
// one record at a time, formatted into buf behind its priority, then written
// whole.
type journalSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
	out io.Writer
}

type journalHandler struct {
	inner slog.Handler // writes into sink.buf
	sink  *journalSink
}

func (h journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h journalHandler) Handle(ctx context.Context, r slog.Record) error {
	s := h.sink
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Reset()
	s.buf.WriteString(priorityPrefix(r.Level))
	if err := h.inner.Handle(ctx, r); err != nil {
		return err
	}
	_, err := s.out.Write(s.buf.Bytes())
	return err
}

func (h journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return journalHandler{inner: h.inner.WithAttrs(as), sink: h.sink}
}

func (h journalHandler) WithGroup(name string) slog.Handler {
	return journalHandler{inner: h.inner.WithGroup(name), sink: h.sink}
}

// priorityPrefix is the sd-daemon(3) prefix of a level: <3> error, <4>
// warning, <6> info, <7> debug.
func priorityPrefix(l slog.Level) string {
	p := journal.PriInfo
	switch {
	case l >= slog.LevelError:
		p = journal.PriErr
	case l >= slog.LevelWarn:
		p = journal.PriWarning
	case l < slog.LevelInfo:
		p = journal.PriDebug
	}
	return fmt.Sprintf("<%d>", p)
}

// atPriority leads every line of text with l's prefix on the journal (a
// message that runs over several lines, like a boot environment's
// recovery, is several journal entries), and leaves it alone elsewhere.
func atPriority(onJournal bool, l slog.Level, text string) string {
	if !onJournal {
		return text
	}
	p := priorityPrefix(l)
	lines := strings.SplitAfter(text, "\n")
	var b strings.Builder
	for _, line := range lines {
		if line != "" {
			b.WriteString(p + line)
		}
	}
	return b.String()
}
