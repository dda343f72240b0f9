package node_test

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/device/node"
	"github.com/otad/otad/internal/testkit/devicetest"
	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/trust"
)

// The chain bound on the device (docs/contract/trust.md rule 3): at most
// MaxChain rotations at once, and at most 2×MaxChain roots in one message.
// A chain past either is refused whole: the device keeps its root, on disk
// too. One at the bound is walked to its end.
func TestChainBoundOnTheDevice(t *testing.T) {
	k := newRootKit(t)
	rel := []*signer.Signer{newRelease(t)}
	docs := make([][]byte, 2*trust.MaxChain+2) // docs[v] is root v
	for v := 1; v < len(docs); v++ {
		docs[v] = k.make(uint64(v), rel, k.root[0], k.root[1])
	}
	chain := func(from, to int) []byte { // roots from..to as one message
		return []byte("[" + string(bytes.Join(docs[from:to+1], []byte(","))) + "]")
	}
	anchor := filepath.Join(t.TempDir(), "root.json")
	devicetest.Must(t, os.WriteFile(anchor, docs[1], 0o644))
	state := t.TempDir()
	keys, err := node.LoadRoot(anchor, state, nil, slog.New(slog.DiscardHandler))
	devicetest.Must(t, err)

	for _, c := range []struct {
		name string
		msg  []byte
		want uint64
		code ota.Code
		says string
	}{
		{"one rotation past the bound", chain(2, trust.MaxChain+2), 1, ota.CodeRootChainLimit, "at most 32"},
		{"more roots in one message than the bound allows", chain(1, 2*trust.MaxChain+1), 1, ota.CodeRootChainLimit, "65 roots in one chain, at most 64"},
		{"history and the bound together", chain(1, trust.MaxChain+1), trust.MaxChain + 1, "", ""},
	} {
		from, to, err := keys.Update([][]byte{c.msg})
		if c.code == "" && err != nil || c.code != "" && (ota.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.says)) {
			t.Fatalf("%s: %v, want %q saying %q", c.name, err, c.code, c.says)
		}
		if to != c.want || keys.Version() != c.want {
			t.Fatalf("%s: %d→%d (holds %d), want %d", c.name, from, to, keys.Version(), c.want)
		}
		kept, err := node.LoadRoot(anchor, state, nil, slog.New(slog.DiscardHandler))
		devicetest.Must(t, err)
		if kept.Version() != c.want {
			t.Fatalf("%s: a restart finds root %d, want %d", c.name, kept.Version(), c.want)
		}
		if c.want == 1 {
			if _, err := os.Stat(filepath.Join(state, node.RootFile)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%s: a refused chain wrote the kept root (%v)", c.name, err)
			}
		}
	}
}
