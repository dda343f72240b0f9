package node

import (
	"log/slog"
	"sync/atomic"

	"github.com/otad/otad/trust"
	"github.com/otad/otad/verify"
)

// Keys is what the device trusts now, swapped whole when the trust
// directory changes or a newer root is accepted (roots.go).
type Keys struct {
	dir  string
	log  *slog.Logger
	cur  atomic.Pointer[Trusted]
	root *rootStore // nil: no [trust] root, keys_dir is read
}

// Trusted is one moment's trust: the release keys offers are checked
// against and how many must sign.
type Trusted struct {
	Keyring *verify.Keyring
	// Threshold is the root's release threshold; 0 without a root (the
	// config's trust.threshold holds).
	Threshold int
	// Root is the newest root accepted; nil without one.
	Root *trust.Root
	// Revoked names each release key an accepted root dropped, with the
	// version that dropped it (docs/contract/trust.md rule 6).
	Revoked map[string]uint64
}

// LoadKeys reads the trust directory; bad key files are logged and skipped.
func LoadKeys(dir string, log *slog.Logger) (*Keys, error) {
	k := &Keys{dir: dir, log: log}
	if err := k.Reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// Reload re-reads the directory: a removed key stops being trusted. With a
// root of trust the directory is not read.
func (k *Keys) Reload() error {
	if k.root != nil {
		return nil
	}
	kr, bad, err := verify.LoadKeyDir(k.dir)
	if err != nil {
		return err
	}
	for _, e := range bad {
		k.log.Warn("ignoring key file", "err", e)
	}
	k.cur.Store(&Trusted{Keyring: kr})
	k.log.Info("trusted keys loaded", "dir", k.dir, "keys", kr.Len())
	return nil
}

// Keyring is the current keyring.
func (k *Keys) Keyring() *verify.Keyring { return k.cur.Load().Keyring }

// Current is what the device trusts now.
func (k *Keys) Current() *Trusted { return k.cur.Load() }

// Version is the trusted root's version, 0 without a root.
func (k *Keys) Version() uint64 {
	if k == nil {
		return 0
	}
	if t := k.cur.Load(); t != nil && t.Root != nil {
		return t.Root.Version
	}
	return 0
}
