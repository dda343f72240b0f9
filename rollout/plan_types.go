package rollout

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/otad/otad/tomlkeys"
)

// The file as decoded: every value untyped, so a value of the wrong type is
// a mistake the plan's check names with its key and line, like the others,
// and does not stop go-toml before the rest is read (a table written as a
// value still does: decodeError words that one).
type rawPlan struct {
	Name  any       `toml:"name"`
	Offer any       `toml:"offer"`
	Group any       `toml:"group"`
	Wave  []rawWave `toml:"wave"`
	Halt  rawHalt   `toml:"halt"`
	Rate  *rawRate  `toml:"rate"`
}

type rawWave struct {
	Devices any `toml:"devices"`
	Percent any `toml:"percent"`
	Soak    any `toml:"soak"`
}

type rawHalt struct {
	MaxFailedPercent any `toml:"max_failed_percent"`
	MinOutcomes      any `toml:"min_outcomes"`
	DeviceTimeout    any `toml:"device_timeout"`
}

type rawRate struct {
	OffersPerMinute any `toml:"offers_per_minute"`
	Increase        any `toml:"increase"`
	MaxPerMinute    any `toml:"max_per_minute"`
}

// typedWave, typedHalt and typedRate check each value's type: a value of
// the wrong type is reported (planCheck.mistype) and left out.
func (c *planCheck) typedWave(i int, w rawWave) waveFile {
	key := fmt.Sprintf("wave[%d].", i+1)
	return waveFile{
		Percent: c.number(key+"percent", w.Percent),
		Devices: c.names(key+"devices", w.Devices),
		Soak:    c.duration(key+"soak", w.Soak),
	}
}

func (c *planCheck) typedHalt(h rawHalt) haltFile {
	f := haltFile{MaxFailedPercent: c.number("halt.max_failed_percent", h.MaxFailedPercent), MinOutcomes: 1}
	if n := c.whole("halt.min_outcomes", h.MinOutcomes); n != nil {
		f.MinOutcomes = *n
	}
	f.DeviceTimeout = c.duration("halt.device_timeout", h.DeviceTimeout)
	return f
}

func (c *planCheck) typedRate(r rawRate) rateFile {
	return rateFile{
		OffersPerMinute: c.number("rate.offers_per_minute", r.OffersPerMinute),
		Increase:        c.number("rate.increase", r.Increase),
		MaxPerMinute:    c.number("rate.max_per_minute", r.MaxPerMinute),
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// mistype reports key's value v as not what the key wants, with its line
// and a hint; later errors about the key (it reads as missing) are left
// out (planCheck.bad).
func (c *planCheck) mistype(key, want string, v any, hint string) {
	c.wrongType(key, want+", not "+valueWords(v)+hint)
}

// wrongType reports msg about key's value, with its line; later errors
// about the key are left out.
func (c *planCheck) wrongType(key, msg string) {
	if line, ok := c.lines[strings.ToLower(key)]; ok {
		msg = fmt.Sprintf("line %d: %s", line, msg)
	}
	c.errs = append(c.errs, &PlanError{Path: c.path, Key: key, Err: fmt.Errorf("%s", msg)})
	c.mistyped[key] = true
}

func (c *planCheck) str(key string, v any) *string {
	switch s := v.(type) {
	case nil:
		return nil
	case string:
		return &s
	}
	c.mistype(key, "a string in quotes", v, "")
	return nil
}

// number takes a whole number or one with a fraction.
func (c *planCheck) number(key string, v any) *float64 {
	switch n := v.(type) {
	case nil:
		return nil
	case float64:
		return &n
	case int64:
		f := float64(n)
		return &f
	}
	c.mistype(key, "a number", v, unquoteHint(v))
	return nil
}

func (c *planCheck) whole(key string, v any) *int64 {
	switch n := v.(type) {
	case nil:
		return nil
	case int64:
		return &n
	}
	c.mistype(key, "a whole number", v, unquoteHint(v))
	return nil
}

// duration is a string for parseDuration; a bare number is told its unit.
func (c *planCheck) duration(key string, v any) *string {
	switch d := v.(type) {
	case nil:
		return nil
	case string:
		return &d
	}
	hint := ""
	switch n := v.(type) {
	case int64:
		hint = fmt.Sprintf(`: write "%ds"`, n)
	case float64:
		if !math.IsNaN(n) && !math.IsInf(n, 0) {
			hint = fmt.Sprintf(`: write "%ss"`, strconv.FormatFloat(n, 'g', -1, 64))
		}
	}
	c.mistype(key, `a duration in quotes (like "30m" or "2h")`, v, hint)
	return nil
}

// names is a list of strings; the first item that is not one is named.
func (c *planCheck) names(key string, v any) []string {
	if v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		c.mistype(key, "a list of device names in quotes", v, "")
		return nil
	}
	out := make([]string, 0, len(list))
	for i, item := range list {
		s, ok := item.(string)
		if !ok {
			c.wrongType(key, fmt.Sprintf("a list of device names in quotes; item %d is %s", i+1, valueWords(item)))
			return nil
		}
		out = append(out, s)
	}
	return out
}

// unquoteHint tells a number written in quotes how to write it.
func unquoteHint(v any) string {
	s, ok := v.(string)
	if !ok {
		return ""
	}
	if _, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err != nil {
		return ""
	}
	return fmt.Sprintf(": write %s without the quotes", strings.TrimSpace(s))
}

// valueWords is what a decoded TOML value is, in a plan writer's words.
func valueWords(v any) string {
	switch v.(type) {
	case string:
		return tomlkeys.KindWords("string")
	case int64:
		return tomlkeys.KindWords("integer")
	case float64:
		return tomlkeys.KindWords("float")
	case bool:
		return tomlkeys.KindWords("bool")
	case []any:
		return tomlkeys.KindWords("array")
	case map[string]any:
		return tomlkeys.KindWords("table")
	}
	return "a date or time"
}

// keyLines maps each key the file sets, lower-cased as go-toml matches
// them and numbered as the plan's errors name them (wave[2].percent), to
// its line. A file that does not parse gives what was read before the
// error; the decoder names that error.
func keyLines(data []byte) map[string]int {
	lines := map[string]int{}
	for _, k := range tomlkeys.Written(data) {
		lines[strings.ToLower(k.Name)] = k.Line
	}
	return lines
}

// decodeInto matches go-toml's "cannot decode TOML integer into struct
// field rollout.rawPlan.Halt of type rollout.rawHalt".
var decodeInto = regexp.MustCompile(`cannot decode TOML (\w+) into `)

// tableWords says what a table key written as a value wants and got, for
// the one type error go-toml stops at.
func tableWords(key, msg string) string {
	m := decodeInto.FindStringSubmatch(msg)
	if m == nil {
		return ""
	}
	want := map[string]string{"wave": "[[wave]] tables", "halt": "a table ([halt])", "rate": "a table ([rate])"}[strings.ToLower(key)]
	if want == "" {
		return ""
	}
	return want + ", not " + tomlkeys.KindWords(m[1])
}
