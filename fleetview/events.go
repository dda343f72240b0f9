package fleetview

import (
	"encoding/json"

	"github.com/otad/otad/ota"
)

// The events a view keeps per device (only with FollowOptions.Events):
// the last few, their messages cut, so a 100,000-device view stays small
// and a device that floods its events topic cannot grow it.
const (
	maxEvents    = 8
	maxEventText = 512 // bytes of an event's message
)

// eventLog is one device's last events, oldest first.
type eventLog []ota.Event

func (l *eventLog) add(e ota.Event) {
	e.Message = cut(e.Message, maxEventText)
	*l = append(*l, e)
	if over := len(*l) - maxEvents; over > 0 {
		*l = append((*l)[:0], (*l)[over:]...)
	}
}

func (l eventLog) list() []ota.Event { return append([]ota.Event{}, l...) }

// decodeEvent reads an event from the broker (outside input).
func decodeEvent(b []byte) (ota.Event, bool) {
	var e ota.Event
	return e, json.Unmarshal(b, &e) == nil
}

// cut keeps at most n bytes of s, on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && s[i]&0xc0 == 0x80 { // back to a rune's first byte
		i--
	}
	return s[:i] + "…"
}
