package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/otad/otad/bootctl/uboot"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/tomlkeys"
)

// DefaultPath is where otad looks without -c.
const DefaultPath = "/etc/otad/otad.toml"

// DefaultControlSocket is control_socket's default (docs/contract/config.md).
const DefaultControlSocket = "/run/otad/otad.sock"

// maxRetries bounds download.retries (docs/contract/config.md): past it a
// server failing for good keeps an install from ending.
const maxRetries = 100

// Config is the whole configuration file.
type Config struct {
	DeviceID      string     `toml:"device_id"`
	Compatible    string     `toml:"compatible"`
	StateDir      string     `toml:"state_dir"`
	ControlSocket string     `toml:"control_socket"`
	MQTT          MQTT       `toml:"mqtt"`
	Trust         Trust      `toml:"trust"`
	Slots         Slots      `toml:"slots"`
	Bootloader    Bootloader `toml:"bootloader"`
	Download      Download   `toml:"download"`
	Commit        Commit     `toml:"commit"`
	Reboot        Reboot     `toml:"reboot"`
	Retry         Retry      `toml:"retry"`

	// Path is the file the config came from, for error messages.
	Path string `toml:"-"`
	// deviceIDFrom is the machine ID file DeviceID was read from, if it was.
	deviceIDFrom string
}

// MQTT is the [mqtt] table; no broker means local-only operation.
type MQTT struct {
	Broker string `toml:"broker"`
	// Brokers are the nodes of one clustered broker, instead of Broker:
	// otad starts at a random one and fails over to the others.
	Brokers     []string `toml:"brokers"`
	TopicPrefix string   `toml:"topic_prefix"`
	Groups      []string `toml:"groups"`
	CAFile      string   `toml:"ca_file"`
	CertFile    string   `toml:"cert_file"`
	KeyFile     string   `toml:"key_file"`
	Username    string   `toml:"username"`
	Password    string   `toml:"password"`
}

// Enabled reports whether a broker is configured (Broker or Brokers).
func (m MQTT) Enabled() bool { return m.Broker != "" || len(m.Brokers) > 0 }

// Trust is the [trust] table.
type Trust struct {
	KeysDir string `toml:"keys_dir"`
	// Root is the root of trust the image ships (docs/contract/trust.md);
	// when set, its release keys replace KeysDir and Threshold.
	Root      string   `toml:"root"`
	Threshold int      `toml:"threshold"`
	ClockSkew Duration `toml:"clock_skew"`
	// SkewAllowance is how far an offer's issued_at may be ahead of the clock.
	SkewAllowance Duration `toml:"skew_allowance"`
}

// Slots is the [slots] table.
type Slots struct {
	A       string `toml:"A"`
	B       string `toml:"B"`
	Cmdline string `toml:"cmdline"`
	// Readback re-reads the written slot from storage and hashes it again.
	Readback *bool `toml:"readback"`
}

// Devices maps slot name to device path.
func (s Slots) Devices() map[ota.Slot]string {
	return map[ota.Slot]string{ota.SlotA: s.A, ota.SlotB: s.B}
}

// Bootloader is the [bootloader] table.
type Bootloader struct {
	Type      string `toml:"type"`
	EnvConfig string `toml:"env_config"`
	EnvFile   string `toml:"env_file"`
	Attempts  int    `toml:"attempts"`
}

// Download is the [download] table.
type Download struct {
	Schemes    []string `toml:"schemes"`
	Retries    int      `toml:"retries"`
	Backoff    Duration `toml:"backoff"`
	MaxBackoff Duration `toml:"max_backoff"`
	// The update server's CA (replacing the system roots) and a client
	// certificate for servers that want one.
	CAFile   string `toml:"ca_file"`
	CertFile string `toml:"cert_file"`
	KeyFile  string `toml:"key_file"`
}

// Commit is the [commit] table.
type Commit struct {
	HealthCommand []string `toml:"health_command"`
	Window        Duration `toml:"window"`
}

// Reboot is the [reboot] table.
type Reboot struct {
	Policy string `toml:"policy"`
}

// Error is a configuration error naming the file and key at fault.
type Error struct {
	Path string
	Key  string
	Msg  string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s: %s", e.Path, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.Path, e.Key, e.Msg)
}

// Load reads and validates path. machineIDFile supplies the default device
// ID (normally /etc/machine-id).
func Load(path, machineIDFile string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(b, path, machineIDFile)
}

// Parse decodes and validates a config file's bytes. The error names every
// problem, each an *Error with the file and key (errors.Join).
func Parse(data []byte, path, machineIDFile string) (*Config, error) {
	c, err := Decode(data, path, machineIDFile)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Decode is Parse that also returns the config, defaults filled in, when
// its values are wrong (nil only when the file cannot be decoded at all):
// `otad config check` goes on to check what it names on the machine.
func Decode(data []byte, path, machineIDFile string) (*Config, error) {
	c := &Config{Path: path}
	var unknown error
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	err := dec.Decode(c)
	var sm *toml.StrictMissingError
	if errors.As(err, &sm) {
		var keys []string
		for _, e := range sm.Errors {
			row, _ := e.Position()
			key := strings.Join(e.Key(), ".")
			keys = append(keys, fmt.Sprintf("%s (line %d)%s", key, row, didYouMean(key)))
		}
		unknown = &Error{Path: path, Msg: "unknown key " + strings.Join(keys, ", ")}
		// A typo'd key is one problem among the others: check the rest too.
		*c = Config{Path: path}
		err = toml.NewDecoder(bytes.NewReader(data)).Decode(c)
	}
	if err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			key := strings.Join(de.Key(), ".")
			return nil, &Error{Path: path, Key: key, Msg: fmt.Sprintf("line %d column %d: %s", row, col, plainType(de.Error()))}
		}
		if be := bareDuration(data, path, err); be != nil {
			return nil, be
		}
		return nil, &Error{Path: path, Msg: err.Error()}
	}
	c.defaults()
	var idErr error
	if c.DeviceID == "" && machineIDFile != "" {
		id, err := os.ReadFile(machineIDFile)
		if err != nil {
			idErr = &Error{Path: path, Key: "device_id", Msg: fmt.Sprintf("not set, and the machine ID cannot be read: %v", err)}
		}
		c.DeviceID = strings.TrimSpace(string(id))
		c.deviceIDFrom = machineIDFile
	}
	errs := append(miscased(data, path), c.validate()...)
	if unknown != nil {
		errs = append([]error{unknown}, errs...)
	}
	if idErr != nil {
		// That, not also that the empty ID is not a valid name.
		errs = slices.DeleteFunc(errs, func(e error) bool { ce, ok := e.(*Error); return ok && ce.Key == "device_id" })
		errs = append([]error{idErr}, errs...)
	}
	return c, errors.Join(errs...)
}

// bareDuration names the key and line of a duration written unquoted
// (window = 300): go-toml hands its text to UnmarshalText and returns the
// error with neither, which every error names (docs/contract/config.md).
func bareDuration(data []byte, path string, err error) *Error {
	var de *durationError
	if !errors.As(err, &de) {
		return nil
	}
	durations := durationKeys()
	for _, w := range tomlkeys.Written(data) {
		if w.Kind == unstable.String || !durations[strings.ToLower(w.Name)] {
			continue
		}
		msg := fmt.Sprintf("line %d: %v: a string in quotes", w.Line, err)
		if w.Kind == unstable.Integer || w.Kind == unstable.Float {
			msg += fmt.Sprintf(", with a unit (%q)", de.text+"s")
		}
		return &Error{Path: path, Key: w.Name, Msg: msg}
	}
	return nil
}

func (c *Config) defaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.StateDir, "/var/lib/otad")
	def(&c.ControlSocket, DefaultControlSocket)
	def(&c.MQTT.TopicPrefix, "ota")
	def(&c.Slots.Cmdline, "/proc/cmdline")
	def(&c.Bootloader.Type, "uboot")
	if c.Bootloader.Type == "uboot" {
		def(&c.Bootloader.EnvConfig, "/etc/fw_env.config")
	}
	if c.Bootloader.Attempts == 0 {
		c.Bootloader.Attempts = 3
	}
	if c.Trust.Threshold == 0 {
		c.Trust.Threshold = 1
	}
	def(&c.Trust.KeysDir, "/etc/otad/keys.d")
	if c.Trust.SkewAllowance.Duration == 0 {
		c.Trust.SkewAllowance.Duration = 24 * time.Hour
	}
	if c.Trust.ClockSkew.Duration == 0 {
		c.Trust.ClockSkew.Duration = 5 * time.Minute
	}
	if c.Download.Schemes == nil {
		c.Download.Schemes = []string{"https"}
	}
	if c.Download.Retries == 0 {
		c.Download.Retries = 3
	}
	if c.Download.Backoff.Duration == 0 {
		c.Download.Backoff.Duration = 15 * time.Second
	}
	if c.Download.MaxBackoff.Duration == 0 {
		c.Download.MaxBackoff.Duration = 5 * time.Minute
	}
	if c.Commit.Window.Duration == 0 {
		c.Commit.Window.Duration = 5 * time.Minute
	}
	def(&c.Reboot.Policy, "immediate")
	c.Retry.defaults()
	if c.Slots.Readback == nil {
		on := true
		c.Slots.Readback = &on
	}
}

// validate names every wrong value.
func (c *Config) validate() []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, &Error{Path: c.Path, Key: key, Msg: fmt.Sprintf(format, a...)})
	}
	errs = append(errs, c.nameErrors()...)
	if c.Compatible == "" {
		bad("compatible", "required (the compatible string offers must name)")
	}
	switch {
	case c.Slots.A == "" || c.Slots.B == "":
		if c.Slots.A == "" {
			bad("slots.A", "required (the device of slot A)")
		}
		if c.Slots.B == "" {
			bad("slots.B", "required (the device of slot B)")
		}
	case c.Slots.A == c.Slots.B:
		bad("slots.B", "same device as slots.A (%s)", c.Slots.A)
	}
	if uboot.CheckAttempts(c.Bootloader.Attempts) != nil {
		// RAUC's range; the U-Boot counters are written in hex, as RAUC does.
		bad("bootloader.attempts", "%d is not between 1 and %d", c.Bootloader.Attempts, uboot.MaxAttempts)
	}
	if c.Trust.Root != "" && !filepath.IsAbs(c.Trust.Root) {
		bad("trust.root", "%q: want an absolute path", c.Trust.Root)
	}
	if c.Trust.Threshold < 1 {
		bad("trust.threshold", "%d: at least 1 signature is required", c.Trust.Threshold)
	}
	if c.Download.Retries < 0 || c.Download.Retries > maxRetries {
		bad("download.retries", "%d is not between 0 and %d (0: the default, 3)", c.Download.Retries, maxRetries)
	}
	inRange := true
	for _, r := range c.durationRanges() {
		if r.d < r.min || r.d > r.max {
			bad(r.key, "%s is not between %s and %s", FormatDuration(r.d), FormatDuration(r.min), FormatDuration(r.max))
			inRange = false
		}
	}
	if inRange && c.Download.MaxBackoff.Duration < c.Download.Backoff.Duration {
		bad("download.max_backoff", "%s is below download.backoff %s", c.Download.MaxBackoff, c.Download.Backoff)
	}
	switch c.Bootloader.Type {
	case "uboot":
	case "grub", "sim":
		if c.Bootloader.EnvFile == "" {
			bad("bootloader.env_file", "required for type %q", c.Bootloader.Type)
		}
	default:
		bad("bootloader.type", "%q is not one of uboot, grub, sim", c.Bootloader.Type)
	}
	for _, s := range c.Download.Schemes {
		if !slices.Contains(ota.Schemes(), s) {
			bad("download.schemes", "%q is not one of https, http, file", s)
		}
	}
	switch c.Reboot.Policy {
	case "immediate", "manual":
	default:
		bad("reboot.policy", "%q is not immediate or manual", c.Reboot.Policy)
	}
	if c.MQTT.Enabled() {
		c.validateMQTT(bad)
	}
	if (c.Download.CertFile == "") != (c.Download.KeyFile == "") {
		bad("download.cert_file", "cert_file and key_file go together")
	}
	c.Retry.validate(bad)
	if len(c.Commit.HealthCommand) > 0 && !filepath.IsAbs(c.Commit.HealthCommand[0]) {
		// Not looked up in $PATH: whoever controls the daemon's environment
		// would choose what decides a commit.
		bad("commit.health_command", "the program %q must be an absolute path", c.Commit.HealthCommand[0])
	}
	return errs
}

func (c *Config) validateMQTT(bad func(key, format string, a ...any)) {
	check := func(key, raw string) (tls bool) {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			bad(key, "%q is not a URL like mqtts://host:8883", raw)
			return false
		}
		switch u.Scheme {
		case "mqtt", "tcp":
		case "mqtts", "ssl", "tls":
			return true
		default:
			bad(key, "scheme %q: use mqtt:// or mqtts://", u.Scheme)
		}
		return false
	}
	switch m := c.MQTT; {
	case m.Broker != "" && len(m.Brokers) > 0:
		bad("mqtt.brokers", "set with mqtt.broker too: give one broker, or every node of a cluster, not both")
	case m.Broker != "":
		check("mqtt.broker", m.Broker)
	default:
		first := false
		for i, b := range m.Brokers {
			key := fmt.Sprintf("mqtt.brokers[%d]", i)
			if tls := check(key, b); i == 0 {
				first = tls
			} else if tls != first {
				bad(key, "%q mixes mqtt:// and mqtts:// with %q", b, m.Brokers[0])
			}
		}
	}
	if (c.MQTT.CertFile == "") != (c.MQTT.KeyFile == "") {
		bad("mqtt.cert_file", "cert_file and key_file go together")
	}
}
