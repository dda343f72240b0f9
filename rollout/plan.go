package rollout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// Plan is a rollout plan (docs/contract/rollouts.md), checked. Offer is set by AttachOffer
// (LoadPlan does both).
type Plan struct {
	Path      string // the file it came from, for messages
	Name      string
	Group     string
	OfferFile string // as written: relative to the plan's directory
	Waves     []Wave
	Halt      HaltRule
	// Rate paces the offers; nil offers each wave's devices at once.
	Rate  *Rate
	Offer PlanOffer
	// Hash identifies the plan and its offer: a changed plan under the same
	// name has a different hash. Set by AttachOffer.
	Hash string

	namedWave map[string]int // device → the wave naming it (from 1); set by ParsePlan
}

// Wave is one step of a plan: named devices, or a cumulative percentage
// of the group.
type Wave struct {
	Devices []string
	Percent float64
	Soak    time.Duration // wait after the wave ends before the next starts
}

// HaltRule says when a rollout stops by itself.
type HaltRule struct {
	MaxFailedPercent float64
	MinOutcomes      int
	DeviceTimeout    time.Duration
}

// Rate is a plan's [rate]: offers per minute, starting at Start at each
// wave's first offer and multiplied by Increase every minute of offering,
// never above Max (docs/contract/rollouts.md, pacing).
type Rate struct {
	Start    float64 // offers_per_minute
	Increase float64 // factor per minute, ≥ 1
	Max      float64 // max_per_minute, ≥ Start
}

// PlanOffer is the signed envelope a plan releases and what identifies it in
// device statuses.
type PlanOffer struct {
	Envelope []byte
	ID       string
	Version  string
	SHA256   string
	// ManifestSHA256 is the SHA-256 of the signed manifest bytes: the
	// offer's identity.
	ManifestSHA256 string
}

// Ref is how device statuses name the offer.
func (o PlanOffer) Ref() Ref {
	return Ref{ID: o.ID, SHA256: o.SHA256, ManifestSHA256: o.ManifestSHA256}
}

// Plan limits: a plan is written by people; these bound what a fuzzer or a
// typo can make the controller hold.
const (
	// maxWaves keeps the retained state under MaxStateSize: each wave
	// started takes a line of it.
	maxWaves   = 32
	maxNamed   = 10000
	maxNameLen = 64
	// DefaultDeviceTimeout applies when [halt] device_timeout is not set.
	DefaultDeviceTimeout = 2 * time.Hour
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// PlanError names the plan file and the key at fault.
type PlanError struct {
	Path string
	Key  string // "" when the error is about the whole file
	Err  error
}

func (e *PlanError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("rollout plan %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("rollout plan %s: %s: %v", e.Path, e.Key, e.Err)
}

func (e *PlanError) Unwrap() error { return e.Err }

// A [[wave]], [halt] and [rate] as checked for their types (rawPlan is the
// file as decoded); pointers tell a missing key from a zero one.
type rateFile struct {
	OffersPerMinute *float64 `toml:"offers_per_minute"`
	Increase        *float64 `toml:"increase"`
	MaxPerMinute    *float64 `toml:"max_per_minute"`
}

type waveFile struct {
	Devices []string `toml:"devices"`
	Percent *float64 `toml:"percent"`
	Soak    *string  `toml:"soak"`
}

type haltFile struct {
	MaxFailedPercent *float64 `toml:"max_failed_percent"`
	MinOutcomes      int64    `toml:"min_outcomes"` // 1 when missing
	DeviceTimeout    *string  `toml:"device_timeout"`
}

// LoadPlan reads a plan file and the offer it names, and checks both. The
// error names every mistake found (errors.Join of *PlanError), not only
// the first.
func LoadPlan(path string) (*Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rollout plan: %w", err)
	}
	p, errs := parsePlan(data, path)
	if p != nil && p.OfferFile != "" {
		offerPath := p.OfferFile
		if !filepath.IsAbs(offerPath) {
			offerPath = filepath.Join(filepath.Dir(path), offerPath)
		}
		if env, err := os.ReadFile(offerPath); err != nil {
			errs = append(errs, &PlanError{Path: path, Key: "offer", Err: err})
		} else if err := p.AttachOffer(env); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// ParsePlan decodes and checks a plan's TOML. Unknown keys are refused;
// every error names path and the key, and the error names every mistake
// found (errors.Join of *PlanError).
func ParsePlan(data []byte, path string) (*Plan, error) {
	p, errs := parsePlan(data, path)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// parsePlan checks everything it can: a plan with mistakes comes back
// with each of them (and nil only when the file is no TOML of this shape).
func parsePlan(data []byte, path string) (*Plan, []error) {
	c := &planCheck{path: path, named: map[string]int{}, mistyped: map[string]bool{}}
	var raw rawPlan
	if err := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields().Decode(&raw); err != nil {
		c.errs = append(c.errs, decodeError(path, data, err))
		if _, unknown := errors.AsType[*toml.StrictMissingError](err); !unknown {
			return nil, c.errs // the rest did not decode
		}
	}
	c.lines = keyLines(data)
	p := &Plan{Path: path}
	p.Name = deref(c.str("name", raw.Name))
	if err := checkName(p.Name); err != nil {
		c.bad("name", "%w", err)
	}
	p.Group = deref(c.str("group", raw.Group))
	if err := checkName(p.Group); err != nil {
		c.bad("group", "%w", err)
	}
	p.OfferFile = deref(c.str("offer", raw.Offer))
	if p.OfferFile == "" {
		c.bad("offer", "missing: the signed envelope file to release (from otactl sign)")
	}
	if len(raw.Wave) == 0 {
		c.bad("wave", "no [[wave]]: a plan needs at least one")
	}
	if len(raw.Wave) > maxWaves {
		c.bad("wave", "%d waves, at most %d", len(raw.Wave), maxWaves)
		raw.Wave = raw.Wave[:maxWaves]
	}
	for i, w := range raw.Wave {
		p.Waves = append(p.Waves, c.wave(i, c.typedWave(i, w)))
	}
	p.Halt = c.halt(c.typedHalt(raw.Halt))
	p.namedWave = c.named
	if raw.Rate != nil {
		r, err := checkRate(c.typedRate(*raw.Rate))
		if err != nil {
			c.add("rate."+err.key, err.err)
		} else {
			p.Rate = r
		}
	}
	return p, c.errs
}

// planCheck gathers every error of a plan, each naming its key, and what
// the waves so far have claimed.
type planCheck struct {
	path        string
	errs        []error
	named       map[string]int // device → wave number, to refuse a device named twice
	lastPercent float64
	lines       map[string]int  // the line of each key the file sets (keyLines)
	mistyped    map[string]bool // keys whose value is of the wrong type, named already
}

func (c *planCheck) bad(key, format string, args ...any) {
	c.add(key, fmt.Errorf(format, args...))
}

// add reports err about key, unless key's value, or one of its keys', was
// of the wrong type: that is named already, and left out it would read as
// missing here.
func (c *planCheck) add(key string, err error) {
	for k := range c.mistyped {
		if k == key || strings.HasPrefix(k, key+".") {
			return
		}
	}
	c.errs = append(c.errs, &PlanError{Path: c.path, Key: key, Err: err})
}

// wave checks the i-th [[wave]] (0-based): devices or a cumulative percent,
// and its soak.
func (c *planCheck) wave(i int, w waveFile) Wave {
	key := fmt.Sprintf("wave[%d]", i+1) // waves are numbered from 1, as the state shows them
	var out Wave
	switch {
	case w.Percent != nil && w.Devices != nil:
		c.bad(key, "has both devices and percent; a wave is one or the other")
	case w.Percent == nil && len(w.Devices) == 0:
		c.bad(key, "needs devices (a non-empty list of names) or percent")
	case w.Percent != nil:
		pc := *w.Percent
		switch {
		case !(pc > 0 && pc <= 100):
			c.bad(key+".percent", "%v is not in (0, 100]", pc)
		case pc < c.lastPercent:
			c.bad(key+".percent", "%v is below an earlier wave's %v: percentages are cumulative and must not decrease", pc, c.lastPercent)
		default:
			c.lastPercent = pc
		}
		out.Percent = pc
	default:
		c.devices(key, i+1, w.Devices)
		out.Devices = append([]string(nil), w.Devices...)
	}
	if w.Soak != nil {
		d, err := parseDuration(*w.Soak)
		switch {
		case err != nil:
			c.bad(key+".soak", "%w", err)
		case d < 0:
			c.bad(key+".soak", "negative")
		default:
			out.Soak = d
		}
	}
	return out
}

// devices checks a wave's named devices: valid IDs, each in one wave only,
// no more than maxNamed in the plan.
func (c *planCheck) devices(key string, wave int, devices []string) {
	for _, d := range devices {
		if len(c.named)+1 > maxNamed {
			c.bad(key+".devices", "more than %d named devices", maxNamed)
			return
		}
		if err := checkDeviceID(d); err != nil {
			c.bad(key+".devices", "%w", err)
			continue
		}
		if at, dup := c.named[d]; dup {
			c.bad(key+".devices", "%q is already in wave %d", d, at)
			continue
		}
		c.named[d] = wave
	}
}

// halt checks [halt]: when failures stop the rollout.
func (c *planCheck) halt(h haltFile) HaltRule {
	r := HaltRule{MinOutcomes: int(min(max(h.MinOutcomes, 1), math.MaxInt32)), DeviceTimeout: DefaultDeviceTimeout}
	switch mf := h.MaxFailedPercent; {
	case mf == nil:
		c.bad("halt.max_failed_percent", "missing: say how many failures stop the rollout (0 stops at the first)")
	case !(*mf >= 0 && *mf <= 100):
		c.bad("halt.max_failed_percent", "%v is not in [0, 100]", *mf)
	default:
		r.MaxFailedPercent = *mf
	}
	if h.MinOutcomes < 1 || h.MinOutcomes > math.MaxInt32 {
		c.bad("halt.min_outcomes", "%d is not a count ≥ 1", h.MinOutcomes)
	}
	if h.DeviceTimeout != nil {
		d, err := parseDuration(*h.DeviceTimeout)
		switch {
		case err != nil:
			c.bad("halt.device_timeout", "%w", err)
		case d <= 0:
			c.bad("halt.device_timeout", "must be positive: a device that never reports must time out")
		default:
			r.DeviceTimeout = d
		}
	}
	return r
}

// decodeError turns a TOML decoding error into a PlanError naming the key.
// Values are decoded untyped (rawPlan), so a type error here is a table
// written as a value: it names the key and its line in the plan's words.
func decodeError(path string, data []byte, err error) error {
	if sm, ok := errors.AsType[*toml.StrictMissingError](err); ok {
		keys := make([]string, 0, len(sm.Errors))
		for _, e := range sm.Errors {
			row, _ := e.Position()
			keys = append(keys, fmt.Sprintf("%s (line %d)", strings.Join(e.Key(), "."), row))
		}
		return &PlanError{Path: path, Err: fmt.Errorf("unknown key %s", strings.Join(keys, ", "))}
	}
	if de, ok := errors.AsType[*toml.DecodeError](err); ok {
		row, col := de.Position()
		key := strings.Join(de.Key(), ".")
		if words := tableWords(key, err.Error()); words != "" {
			if line, ok := keyLines(data)[strings.ToLower(key)]; ok {
				row = line
			}
			return &PlanError{Path: path, Key: key, Err: fmt.Errorf("line %d: %s", row, words)}
		}
		return &PlanError{Path: path, Key: key, Err: fmt.Errorf("line %d column %d: %w", row, col, err)}
	}
	return &PlanError{Path: path, Err: err}
}

// parseDuration reads "30m", "2h"; the caller names the key.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("not a duration (like \"30m\" or \"2h\"): %q", s)
	}
	return d, nil
}

// checkName holds rollout and group names to what every broker carries in
// one topic level (docs/contract/mqtt.md).
func checkName(s string) error {
	if s == "" {
		return errors.New("missing")
	}
	if len(s) > maxNameLen || !namePattern.MatchString(s) {
		return fmt.Errorf("%q: 1 to %d of [A-Za-z0-9_-]", s, maxNameLen)
	}
	return nil
}

// checkDeviceID refuses a name no device can have (ota.CheckName).
func checkDeviceID(s string) error {
	if err := ota.CheckName(s); err != nil {
		return fmt.Errorf("device %q: %w", s, err)
	}
	return nil
}

// AttachOffer reads the identity of the signed envelope the plan releases
// and computes the plan's hash. Signatures are the devices' business; the
// manifest is read so outcomes can be matched to this offer.
func (p *Plan) AttachOffer(envelope []byte) error {
	env, err := verify.ParseEnvelope(envelope)
	if err != nil {
		return &PlanError{Path: p.Path, Key: "offer", Err: err}
	}
	m, err := verify.ParseManifest(env.Manifest)
	if err != nil {
		return &PlanError{Path: p.Path, Key: "offer", Err: err}
	}
	if len(m.Devices) > 0 {
		// Devices outside the list would refuse it and count as failures.
		return &PlanError{Path: p.Path, Key: "offer", Err: fmt.Errorf("manifest %s names devices %v; a rollout releases an offer for the whole group", m.ID, m.Devices)}
	}
	p.Offer = PlanOffer{Envelope: envelope, ID: m.ID, Version: m.Version, SHA256: m.Payload.SHA256, ManifestSHA256: verify.EnvelopeDigest(envelope)}
	p.Hash = p.hash()
	return nil
}

// hash is the SHA-256 of a canonical form of the checked plan (defaults
// filled in, so comments, layout and spelled-out defaults do not change it)
// followed by the offer's bytes. The offer's file name is not part of it.
func (p *Plan) hash() string {
	var b strings.Builder
	fmt.Fprintf(&b, "otad-rollout-plan 1\nname %s\ngroup %s\n", p.Name, p.Group)
	for _, w := range p.Waves {
		if w.Devices != nil {
			fmt.Fprintf(&b, "wave devices %s", strings.Join(w.Devices, ","))
		} else {
			fmt.Fprintf(&b, "wave percent %s", strconv.FormatFloat(w.Percent, 'g', -1, 64))
		}
		fmt.Fprintf(&b, " soak %d\n", w.Soak)
	}
	fmt.Fprintf(&b, "halt %s %d %d\n", strconv.FormatFloat(p.Halt.MaxFailedPercent, 'g', -1, 64), p.Halt.MinOutcomes, p.Halt.DeviceTimeout)
	if r := p.Rate; r != nil {
		g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
		fmt.Fprintf(&b, "rate %s %s %s\n", g(r.Start), g(r.Increase), g(r.Max))
	}
	fmt.Fprintf(&b, "offer %d\n", len(p.Offer.Envelope))
	h := sha256.New()
	h.Write([]byte(b.String()))
	h.Write(p.Offer.Envelope)
	return hex.EncodeToString(h.Sum(nil))
}
