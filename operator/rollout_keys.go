package operator

import (
	"crypto"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"

	"github.com/otad/otad/rollout"
	"github.com/otad/otad/rollout/seen"
	"github.com/otad/otad/trust"
	"github.com/otad/otad/verify"
)

// operatorFlags are the keys of the signed control plane
// (docs/contract/rollouts.md): the operator key that signs what a command
// writes under {prefix}/rollouts/, and the operator public keys whose
// signatures its readers believe. The config file's [operator] fills what
// the flags leave out.
type operatorFlags struct {
	fs       *flag.FlagSet
	key      string
	trust    stringList
	insecure bool
	stateDir string
}

// addStateDir adds --state-dir, for the readers that keep what they saw
// across restarts: a controller and the dashboard.
func (o *operatorFlags) addStateDir() {
	o.fs.StringVar(&o.stateDir, "state-dir", "", "keep the highest counters seen of the rollouts' states and commands in this directory (created 0700), so that an older signed message published again while this command was not running is refused after a restart (docs/contract/rollouts.md, a signed control plane); without it, within this run only")
}

// counters opens the counters of --state-dir, or of [operator] state_dir
// in the config: nil when neither is given.
func (o *operatorFlags) counters() (*seen.Store, error) {
	if o.stateDir == "" {
		set := false
		o.fs.Visit(func(f *flag.Flag) { set = set || f.Name == "state-dir" })
		c, err := loadConfig()
		if err != nil {
			return nil, err
		}
		if c != nil && !set {
			o.stateDir = c.Operator.StateDir
		}
	}
	if o.stateDir == "" {
		return nil, nil
	}
	return seen.Open(o.stateDir, nil)
}

func addOperatorFlags(fs *flag.FlagSet, signs bool) *operatorFlags {
	o := &operatorFlags{fs: fs}
	if signs {
		fs.StringVar(&o.key, "operator-key", "", "the operator key (PEM, from otactl keygen) that signs what this command writes under {prefix}/rollouts/")
	}
	fs.Var(&o.trust, "trust", "the trusted operator public keys: a directory of .pub files, one .pub file, or a root.json (its operator role); repeatable")
	fs.BoolVar(&o.insecure, "insecure-unsigned", false, "an unsigned control plane: write without an operator key, and take unsigned rollout messages as they are (anyone who may publish under {prefix}/rollouts/ steers the rollouts)")
	return o
}

// load reads the trusted keys and, when signing, the operator key: with
// neither given nor --insecure-unsigned, the command is refused (exit 2)
// rather than trusting whoever can publish. The key must be among the
// trusted: its readers would otherwise ignore everything it signs.
func (o *operatorFlags) load(signs bool) (rollout.Trust, crypto.Signer, error) {
	set := map[string]bool{}
	o.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c, err := loadConfig()
	if err != nil {
		return rollout.Trust{}, nil, err
	}
	if c != nil {
		if !set["operator-key"] && o.key == "" {
			o.key = c.Operator.Key
		}
		if !set["trust"] {
			o.trust = append(o.trust, c.Operator.Trust...)
		}
	}
	var keys []verify.Key
	for _, p := range o.trust {
		ks, err := operatorKeys(p)
		if err != nil {
			return rollout.Trust{}, nil, err
		}
		keys = append(keys, ks...)
	}
	t := rollout.Trust{Keys: verify.NewKeyring(keys...), Unsigned: o.insecure}
	if t.Keys.Len() == 0 && !o.insecure {
		return t, nil, usagef("no trusted operator keys: give --trust DIR (or [operator] trust in the otactl config), or --insecure-unsigned for an unsigned control plane (docs/contract/rollouts.md)")
	}
	if !signs {
		return t, nil, nil
	}
	if o.key == "" {
		if o.insecure {
			return t, nil, nil
		}
		return t, nil, usagef("no operator key: give --operator-key FILE (or [operator] key in the otactl config), or --insecure-unsigned")
	}
	key, err := verify.LoadPrivateKeyFile(o.key)
	if err != nil {
		return t, nil, err
	}
	id, err := verify.KeyID(key.Public())
	if err != nil {
		return t, nil, err
	}
	if t.Keys.Len() > 0 && !slices.ContainsFunc(t.Keys.Keys(), func(k verify.Key) bool { return k.ID == id }) {
		return t, nil, usagef("the operator key %s (keyid %.16s) is not among the trusted operator keys: readers would ignore what it signs", o.key, id)
	}
	return t, key, nil
}

// operatorKeys are the operator keys of path: a directory of public keys,
// one public key, or a root of trust's operator role.
func operatorKeys(path string) ([]verify.Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--trust: %w", err)
	}
	if fi.IsDir() {
		kr, bad, err := verify.LoadKeyDir(path)
		if err != nil {
			return nil, fmt.Errorf("--trust: %w", err)
		}
		if len(bad) > 0 {
			return nil, fmt.Errorf("--trust %s: %w", path, errors.Join(bad...))
		}
		return kr.Keys(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--trust: %w", err)
	}
	if k, err := verify.ParsePublicKeyPEM(b); err == nil {
		return []verify.Key{k}, nil
	}
	r, err := trust.Parse(b)
	if err != nil {
		return nil, usagef("--trust %s: neither a public key nor a root of trust: %w", path, err)
	}
	// A root is trusted as a device trusts the root an image ships
	// (docs/contract/trust.md rule 1): an unsigned one, straight from
	// otactl root init, names keys nobody vouched for.
	if err := trust.Anchor(r); err != nil {
		return nil, usagef("--trust %s: not a root of trust a device would take (sign it with otactl root sign): %w", path, err)
	}
	if len(r.Operator.Keys) == 0 {
		return nil, usagef("--trust %s: the root of trust has no operator role", path)
	}
	// Each control-plane message carries one operator signature
	// (docs/contract/rollouts.md): a higher threshold cannot be met, and is
	// refused rather than silently taken as 1.
	if r.Operator.Threshold > 1 {
		return nil, usagef("--trust %s: root version %d asks for %d operator signatures, but a rollout message carries one (docs/contract/rollouts.md): give the root an operator threshold of 1", path, r.Version, r.Operator.Threshold)
	}
	return r.Operator.Keys, nil
}
