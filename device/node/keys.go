package node

import (
	"log/slog"
	"sync/atomic"

	"github.com/otad/otad/verify"
)

// Keys is the trusted keyring, swapped whole when the trust directory changes.
type Keys struct {
	dir string
	log *slog.Logger
	cur atomic.Pointer[verify.Keyring]
}

// LoadKeys reads the trust directory; bad key files are logged and skipped.
func LoadKeys(dir string, log *slog.Logger) (*Keys, error) {
	k := &Keys{dir: dir, log: log}
	if err := k.Reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// Reload re-reads the directory: a removed key stops being trusted.
func (k *Keys) Reload() error {
	kr, bad, err := verify.LoadKeyDir(k.dir)
	if err != nil {
		return err
	}
	for _, e := range bad {
		k.log.Warn("ignoring key file", "err", e)
	}
	k.cur.Store(kr)
	k.log.Info("trusted keys loaded", "dir", k.dir, "keys", kr.Len())
	return nil
}

// Keyring is the current keyring.
func (k *Keys) Keyring() *verify.Keyring { return k.cur.Load() }
