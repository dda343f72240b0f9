package device

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/otad/otad/device/control"
	"github.com/otad/otad/device/node"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/trust"
)

const trustUsage = `usage: otad trust update [-c FILE] [-v] FILE...

Takes root documents (or chains of them) through the checks of
docs/contract/trust.md and keeps the newest root reached: through the
daemon if it runs, else in this process. Exit codes: 0 updated, 1 failure,
2 usage, 3 refused (bad_root, root_signature, root_version,
root_chain_limit: nothing changed), 4 busy.
`

func cmdTrust(e *env, args []string) int {
	args = args[1:]
	if len(args) > 0 && args[0] == "update" {
		return trustUpdate(e, append([]string{"trust update"}, args[1:]...))
	}
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(e.stdout, trustUsage)
		return ota.ExitOK
	}
	fmt.Fprint(e.stderr, trustUsage)
	return ota.ExitUsage
}

func trustUpdate(e *env, args []string) int {
	e.logLevel = slog.LevelWarn // one line says what happened; -v brings the log back
	files, cfg, code := e.setup(args, -1, nil)
	if cfg == nil {
		return code
	}
	if cfg.Trust.Root == "" {
		return e.fail(ota.ExitUsage, "%s: trust.root is not set: this device trusts trust.keys_dir (%s)", cfg.Path, cfg.Trust.KeysDir)
	}
	docs := make([][]byte, len(files))
	for i, f := range files {
		b, err := readLimited(f, trust.MaxChainSize)
		if err != nil {
			return e.fail(ota.ExitFailure, "%v", err)
		}
		docs[i] = b
	}
	u, err := control.Client{Path: cfg.ControlSocket}.UpdateRoot(e.ctx, docs)
	if errors.Is(err, control.ErrNoDaemon) {
		// No agent is needed: under the state lock, the kept root only.
		lock, code := e.lock(cfg)
		if lock == nil {
			return code
		}
		defer lock.Release()
		keys, lerr := node.LoadRoot(cfg.Trust.Root, cfg.StateDir, nil, e.logger())
		if lerr != nil {
			return e.fail(ota.ExitUsage, "%s: trust.root: %v", cfg.Path, lerr)
		}
		u.From, u.To, err = keys.Update(docs)
	}
	if err != nil {
		if ota.CodeOf(err) != "" {
			return e.fail(ota.ExitRefused, "root refused, the device keeps version %d: %v", u.From, inFile(files, docs, err))
		}
		return e.fail(ota.ExitFailure, "%v", err)
	}
	fmt.Fprintf(e.stdout, "root of trust: version %d, was %d\n", u.To, u.From)
	return ota.ExitOK
}

// inFile names the file of a refusal that one file's content caused: the
// device, given the documents alone, can only say "root document 2". A
// refusal of the chain as a whole (a signature, a version) names the root
// version at fault, which the file holds.
func inFile(files []string, docs [][]byte, err error) error {
	for i, d := range docs {
		if _, perr := trust.ParseChain(d); perr != nil {
			return fmt.Errorf("%s: %w", files[i], perr)
		}
	}
	return err
}

// readLimited reads a file of at most limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, over the limit of %d", path, st.Size(), limit)
	}
	return os.ReadFile(path)
}
