package node

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/otad/otad/agent"
	"github.com/otad/otad/durable"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/trust"
	"github.com/otad/otad/verify"
)

// Where the device keeps the newest root it accepted, in its state
// directory (docs/contract/trust.md). The revoked keys are written first:
// a power cut between the two leaves a revoked key the old root still
// lists, and a listed key is never taken for revoked.
const (
	RootFile    = "root.json"
	RevokedFile = "revoked.json"
)

// rootStore keeps the accepted root; mu makes updates one at a time.
type rootStore struct {
	dir string
	fs  durable.FS
	mu  sync.Mutex
	// memory keeps an accepted root in memory only (otad info looks, it
	// changes nothing).
	memory bool
}

// inMemory has updates keep nothing on disk.
func (k *Keys) inMemory() {
	if k.root != nil {
		k.root.memory = true
	}
}

// LoadRoot is Keys from a root of trust: the image's root at anchorPath,
// or the newer one kept in stateDir. Either must be signed by a threshold
// of its own root keys. A kept root that does not read is logged and the
// image's taken: it was written durably, so it is damage, not a power cut.
func LoadRoot(anchorPath, stateDir string, fsys durable.FS, log *slog.Logger) (*Keys, error) {
	anchor, err := ReadAnchor(anchorPath)
	if err != nil {
		return nil, err
	}
	if fsys == nil {
		fsys = durable.OS{}
	}
	k := &Keys{log: log, root: &rootStore{dir: stateDir, fs: fsys}}
	cur := anchor
	kept, err := readRoot(filepath.Join(stateDir, RootFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		log.Error("the kept root does not read: trusting the image's", "err", err, "image_root", anchor.Version)
	case trust.Anchor(kept) != nil:
		log.Error("the kept root is not signed by its own root keys: trusting the image's", "err", trust.Anchor(kept), "image_root", anchor.Version)
	case kept.Version > anchor.Version:
		cur = kept
	}
	revoked := map[string]uint64{}
	if b, err := os.ReadFile(filepath.Join(stateDir, RevokedFile)); err == nil {
		if err := json.Unmarshal(b, &revoked); err != nil {
			log.Warn("the kept list of revoked keys does not read", "err", err)
		}
	}
	for _, key := range trust.Revoked(anchor, cur) {
		if _, ok := revoked[key.ID]; !ok {
			revoked[key.ID] = cur.Version
		}
	}
	k.cur.Store(trusted(cur, revoked))
	log.Info("root of trust loaded", "version", cur.Version, "release_keys", len(cur.Release.Keys), "threshold", cur.Release.Threshold)
	return k, nil
}

// ReadAnchor reads the root an image ships ([trust] root): a root
// document signed by a threshold of its own root keys.
func ReadAnchor(path string) (*trust.Root, error) {
	r, err := readRoot(path)
	if err != nil {
		return nil, err
	}
	if err := trust.Anchor(r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// RootInMemory is Keys from anchor (ReadAnchor's) that keep every root
// they accept in memory only: a simulated device holds them across its
// simulated reboots as it holds its journal.
func RootInMemory(anchor *trust.Root, log *slog.Logger) *Keys {
	k := &Keys{log: log, root: &rootStore{memory: true}}
	k.cur.Store(trusted(anchor, map[string]uint64{}))
	return k
}

func trusted(r *trust.Root, revoked map[string]uint64) *Trusted {
	for id := range revoked {
		if r.Release.Has(id) { // listed again: trusted again
			delete(revoked, id)
		}
	}
	return &Trusted{Keyring: r.Release.Keyring(), Threshold: r.Release.Threshold, Root: r, Revoked: revoked}
}

func readRoot(path string) (*trust.Root, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, trust.MaxRootSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r, err := trust.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ErrNoRoot refuses a root update on a device that trusts keys_dir.
var ErrNoRoot = ota.Errorf(ota.CodeBadRoot, "this device has no root of trust ([trust] root): it trusts trust.keys_dir")

// UpdateRoot walks the trusted root along chain (trust.Walk) and keeps the
// newest root reached: the revoked keys, then the root, each written so a
// power cut leaves the old or the new. A refusal changes nothing. It
// returns the versions before and after.
func (k *Keys) UpdateRoot(chain []*trust.Root) (from, to uint64, err error) {
	if k.root == nil {
		return 0, 0, ErrNoRoot
	}
	k.root.mu.Lock()
	defer k.root.mu.Unlock()
	cur := k.cur.Load()
	next, err := trust.Walk(cur.Root, chain)
	if err != nil {
		return cur.Root.Version, cur.Root.Version, err
	}
	revoked := maps.Clone(cur.Revoked)
	prev := cur.Root
	for _, r := range chain {
		if r.Version <= cur.Root.Version {
			continue
		}
		for _, key := range trust.Revoked(prev, r) {
			revoked[key.ID] = r.Version
		}
		prev = r
	}
	t := trusted(next, revoked)
	if err := k.root.keep(next, t.Revoked); err != nil {
		return cur.Root.Version, cur.Root.Version, err
	}
	k.cur.Store(t)
	k.log.Info("root of trust updated", "from", cur.Root.Version, "to", next.Version, "release_keys", len(next.Release.Keys),
		"threshold", next.Release.Threshold, "revoked", len(t.Revoked))
	return cur.Root.Version, next.Version, nil
}

func (s *rootStore) keep(r *trust.Root, revoked map[string]uint64) error {
	if s.memory {
		return nil
	}
	rev, err := json.Marshal(revoked)
	if err != nil {
		return err
	}
	doc, err := r.Marshal()
	if err != nil {
		return err
	}
	if err := durable.WriteFileOn(s.fs, filepath.Join(s.dir, RevokedFile), rev, 0o644); err != nil {
		return fmt.Errorf("keep the revoked keys: %w", err)
	}
	if err := durable.WriteFileOn(s.fs, filepath.Join(s.dir, RootFile), doc, 0o644); err != nil {
		return fmt.Errorf("keep root version %d: %w", r.Version, err)
	}
	return nil
}

// Update is UpdateRoot on docs, each a root document or a chain, taken
// together as one chain, oldest first.
func (k *Keys) Update(docs [][]byte) (from, to uint64, err error) {
	var chain []*trust.Root
	for i, d := range docs {
		c, err := trust.ParseChain(d)
		if err != nil {
			v := k.Version()
			if len(docs) > 1 {
				return v, v, fmt.Errorf("root document %d: %w", i+1, err)
			}
			return v, v, err
		}
		chain = append(chain, c...)
	}
	slices.SortStableFunc(chain, func(a, b *trust.Root) int { return cmp.Compare(a.Version, b.Version) })
	return k.UpdateRoot(chain)
}

// takeCarried takes the chain an offer's envelope carries (its "root"
// field) through the checks before the offer's signatures are: an offer
// signed by new release keys brings the root that trusts them. A chain no
// newer than the device's is no news; a refused one is logged and the
// offer judged by the keys trusted now.
func (k *Keys) takeCarried(raw []byte) {
	if k == nil || k.root == nil {
		return
	}
	env, err := verify.ParseEnvelope(raw)
	if err != nil || len(env.Root) == 0 {
		return
	}
	from, to, err := k.Update([][]byte{env.Root})
	switch {
	case err == nil:
	case ota.CodeOf(err) == ota.CodeRootVersion && from == to && strings.Contains(err.Error(), "not newer"):
		k.log.Debug("root of trust in the offer: nothing newer", "version", from)
	default:
		k.log.Warn("root of trust in the offer refused", "version", from, "err", err)
	}
}

// UpdateRoot is a root update from outside (otad trust update, the
// retained MQTT topic): each of docs is a root document or a chain, taken
// together as one chain (trust.ParseChain, UpdateRoot). Once accepted, the
// status says the new version at once.
func (n *Node) UpdateRoot(ctx context.Context, docs [][]byte) (from, to uint64, err error) {
	from, to, err = n.Keys.Update(docs)
	if err != nil {
		return from, to, err
	}
	if err := n.Agent.Refresh(ctx); err != nil && !errors.Is(err, agent.ErrStopped) {
		return from, to, err
	}
	return from, to, nil
}
