package operator

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// configEnv names otactl's config file; without it, it is
// ~/.config/otactl/config.toml ($XDG_CONFIG_HOME/otactl/config.toml) when
// that exists (docs/contract/config.md, otactl's config).
const configEnv = "OTACTL_CONFIG"

// fileConfig is otactl's config file: what every fleet command would
// otherwise take as flags. A flag given wins over it.
type fileConfig struct {
	Brokers  []string `toml:"brokers"`
	Prefix   string   `toml:"prefix"`
	Username string   `toml:"username"`
	TLS      struct {
		CA   string `toml:"ca"`
		Cert string `toml:"cert"`
		Key  string `toml:"key"`
	} `toml:"tls"`
	// Operator is the operator key that signs the control plane and the
	// operator public keys trusted (docs/contract/rollouts.md, a signed
	// control plane): operatorFlags.load takes them.
	Operator struct {
		Key   string   `toml:"key"`
		Trust []string `toml:"trust"`
		// StateDir keeps the highest counters a controller or the
		// dashboard has seen, across restarts (--state-dir).
		StateDir string `toml:"state_dir"`
	} `toml:"operator"`

	path string
}

// configPath is the config file to read: $OTACTL_CONFIG (which must
// exist), else the user's (if it exists); "" for none.
func configPath() (string, bool) {
	if p := os.Getenv(configEnv); p != "" {
		return p, true
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", false
	}
	return filepath.Join(dir, "otactl", "config.toml"), false
}

// loadConfig reads otactl's config file; a missing default file is no
// config (nil), a missing $OTACTL_CONFIG an error.
func loadConfig() (*fileConfig, error) {
	path, named := configPath()
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !named {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("otactl config: %w", err)
	}
	var c fileConfig
	if err := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields().Decode(&c); err != nil {
		if sm, ok := errors.AsType[*toml.StrictMissingError](err); ok {
			var keys []string
			for _, e := range sm.Errors {
				row, _ := e.Position()
				keys = append(keys, fmt.Sprintf("%s (line %d)", strings.Join(e.Key(), "."), row))
			}
			return nil, fmt.Errorf("otactl config %s: unknown key %s", path, strings.Join(keys, ", "))
		}
		return nil, fmt.Errorf("otactl config %s: %w", path, err)
	}
	c.path = path
	// Files are relative to the config file's directory.
	dir := filepath.Dir(path)
	for _, p := range []*string{&c.TLS.CA, &c.TLS.Cert, &c.TLS.Key, &c.Operator.Key, &c.Operator.StateDir} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for i, p := range c.Operator.Trust {
		if !filepath.IsAbs(p) {
			c.Operator.Trust[i] = filepath.Join(dir, p)
		}
	}
	return &c, nil
}

// fromConfig fills the broker flags not given on the command line from
// otactl's config file.
func (b *brokerFlags) fromConfig() error {
	c, err := loadConfig()
	if err != nil || c == nil {
		return err
	}
	set := map[string]bool{}
	if b.fs != nil {
		b.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	}
	fill := func(flagName string, dst *string, v string) {
		if !set[flagName] && v != "" {
			*dst = v
		}
	}
	if !set["broker"] && len(c.Brokers) > 0 {
		b.brokers = append(stringList(nil), c.Brokers...)
	}
	fill("prefix", &b.prefix, c.Prefix)
	fill("username", &b.username, c.Username)
	fill("ca", &b.ca, c.TLS.CA)
	fill("cert", &b.cert, c.TLS.Cert)
	fill("key", &b.key, c.TLS.Key)
	return nil
}
