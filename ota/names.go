package ota

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxNameLen bounds a device ID, group or topic prefix: AWS IoT Core's
// client ID limit (128 bytes), the smallest of the brokers otad supports.
const MaxNameLen = 128

// ErrName marks a name a topic cannot carry on every supported broker.
var ErrName = errors.New("not a valid name")

// CheckName reports why s cannot be a device ID, a group or the topic
// prefix (docs/contract/mqtt.md): 1 to 128 ASCII letters, digits, '_' or '-'. Everything
// else changes a topic somewhere: '/' adds a level, '+' and '#' are
// wildcards, RabbitMQ maps '/' to '.' so a '.' splits a level there, and
// brokers differ on spaces, ':' and non-ASCII. A name refused here would
// otherwise be a device that silently never receives its offers.
func CheckName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty", ErrName)
	case len(s) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrName, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			continue
		}
		what := fmt.Sprintf("%q", c)
		switch {
		case c >= utf8.RuneSelf:
			r, _ := utf8.DecodeRuneInString(s[i:])
			what = fmt.Sprintf("non-ASCII %q", r)
		case c == '.':
			what += " (RabbitMQ maps '/' to '.', so it would split the topic level)"
		case c == '/' || c == '+' || c == '#':
			what += " (a topic level separator or wildcard)"
		}
		return fmt.Errorf("%w: %q has %s at byte %d: only A-Z, a-z, 0-9, '_' and '-'", ErrName, s, what, i)
	}
	return nil
}
