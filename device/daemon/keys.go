package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/otad/otad/device/node"
)

// watchKeys reloads the trust directory when it changes: a removed key stops
// being trusted at once; a bad file is logged and skipped.
func watchKeys(ctx context.Context, dir string, keys *node.Keys, log *slog.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("trust.keys_dir: watch: %w", err)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return fmt.Errorf("trust.keys_dir %s: watch: %w", dir, err)
	}
	go func() {
		defer w.Close()
		// Editors and config management write in several steps: settle first.
		var settle <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				settle = time.After(200 * time.Millisecond)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("trust.keys_dir watch", "err", err)
			case <-settle:
				if err := keys.Reload(); err != nil {
					log.Error("reloading trusted keys", "err", err)
				}
			}
		}
	}()
	return nil
}
