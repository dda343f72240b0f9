package operator

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/otad/otad/durable"
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/mqtt"
	"github.com/otad/otad/trust"
	"github.com/otad/otad/verify"
)

// rootCommands are `otactl root`'s subcommands (docs/contract/trust.md).
func rootCommands() map[string]cli.Command {
	write := func(sub string) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			return rootWrite(sub, args, stdout, stderr)
		}
	}
	offline := func(fn func(args []string, stdout, stderr io.Writer) error) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			return fn(args, stdout, stderr)
		}
	}
	return map[string]cli.Command{
		"init":    {Summary: "write root version 1 (unsigned) from the roles' public keys, or --from-keys-dir", Run: write("init")},
		"next":    {Summary: "write the next version after --from PREV (unsigned)", Run: write("next")},
		"sign":    {Summary: "add one signature to a root, in place", Run: offline(rootSign)},
		"verify":  {Summary: "walk a chain from a trusted root as a device would", Run: offline(rootVerify)},
		"publish": {Summary: "publish a chain retained on {prefix}/trust/root (or a group's)", Run: rootPublish},
		"attach":  {Summary: "print an envelope carrying the chain its offer needs", Run: offline(rootAttach)},
	}
}

// roleFlags are one role's keys and threshold on the command line.
type roleFlags struct {
	keys      *string
	threshold *int
}

// role is the role the flags say, or prev's where they say nothing.
func (f roleFlags) role(name string, prev trust.Role) (trust.Role, error) {
	r := prev
	if *f.keys != "" {
		r.Keys = nil
		for _, p := range strings.Split(*f.keys, ",") {
			k, err := verify.LoadKeyFile(strings.TrimSpace(p))
			if err != nil {
				return trust.Role{}, usagef("--%s: %v", name, err)
			}
			r.Keys = append(r.Keys, k)
		}
	}
	if *f.threshold != 0 {
		r.Threshold = *f.threshold
	}
	return r, nil
}

// rootWrite is init and next: a new, unsigned root, checked as a device
// would check it before it is written.
func rootWrite(sub string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("root "+sub, "[flags] --out FILE", stderr)
	roles := map[string]roleFlags{}
	for _, name := range []string{"root", "release", "operator"} {
		roles[name] = roleFlags{
			keys:      fs.String(name, "", name+" public keys, PEM files separated by commas"),
			threshold: fs.Int(name+"-threshold", 0, "how many "+name+" keys must sign"),
		}
	}
	out := fs.String("out", "", "the file to write (never overwritten)")
	from := fs.String("from", "", "next: the root this one follows")
	keysDir := fs.String("from-keys-dir", "", "init: the release keys of a device's trust directory (trust.keys_dir)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *out == "" {
		return usagef("want --out FILE and no arguments")
	}
	prev := &trust.Root{}
	switch {
	case sub == "next" && *from == "":
		return usagef("next: missing --from PREV")
	case sub == "next":
		if prev, err = readRootFile(*from); err != nil {
			return err
		}
	case *from != "":
		return usagef("--from is for next")
	}
	r := &trust.Root{Version: prev.Version + 1}
	if r.Root, err = roles["root"].role("root", prev.Root); err != nil {
		return err
	}
	if *keysDir != "" {
		if sub != "init" || *roles["release"].keys != "" {
			return usagef("--from-keys-dir is for init, instead of --release")
		}
		kr, bad, err := verify.LoadKeyDir(*keysDir)
		if err != nil {
			return err
		}
		// As a device does with keys_dir (docs/contract/config.md): a file
		// that is not a key is skipped, and said.
		for _, b := range bad {
			fmt.Fprintf(stderr, "otactl root init: --from-keys-dir: skipped: %v\n", b)
		}
		if kr.Len() == 0 {
			return usagef("--from-keys-dir %s: no public key in it", *keysDir)
		}
		prev.Release = trust.Role{Keys: kr.Keys(), Threshold: 1}
	}
	if r.Release, err = roles["release"].role("release", prev.Release); err != nil {
		return err
	}
	if r.Operator, err = roles["operator"].role("operator", prev.Operator); err != nil {
		return err
	}
	if err := r.Check(); err != nil {
		return err
	}
	doc, err := r.Marshal()
	if err != nil {
		return err
	}
	if err := writeNewFile(*out, doc, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: root version %d, unsigned: %d root keys (threshold %d), %d release keys (threshold %d), %d operator keys\n",
		*out, r.Version, len(r.Root.Keys), r.Root.Threshold, len(r.Release.Keys), r.Release.Threshold, len(r.Operator.Keys))
	return nil
}

func readRootFile(path string) (*trust.Root, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := trust.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// readChain reads files of roots or chains as one chain, oldest first.
func readChain(files []string) ([]*trust.Root, error) {
	var chain []*trust.Root
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		c, err := trust.ParseChain(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		chain = append(chain, c...)
	}
	slices.SortStableFunc(chain, func(a, b *trust.Root) int { return cmp.Compare(a.Version, b.Version) })
	return chain, nil
}

// rootSign adds one signature in place: the holders of root keys sign one
// after another, each on their own offline machine. A signature that can
// never count (docs/contract/trust.md rule 2) is refused before the file
// changes: a key of another role of this root, any key but its own root
// keys for version 1, and with --previous a key that is not a root key of
// that version before.
func rootSign(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("root sign", "--key R.key [--previous PREV] FILE", stderr)
	keyPath := fs.String("key", "", "the private root key to sign with")
	prevPath := fs.String("previous", "", "the root version before this one: a key that is not one of this root's own root keys must be one of its root keys")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if *keyPath == "" || len(pos) != 1 {
		return usagef("want --key R.key and one FILE")
	}
	r, err := readRootFile(pos[0])
	if err != nil {
		return err
	}
	var prev *trust.Root
	if *prevPath != "" {
		if prev, err = readRootFile(*prevPath); err != nil {
			return err
		}
		if prev.Version+1 != r.Version {
			return usagef("--previous %s: root version %d, not the version before %d", *prevPath, prev.Version, r.Version)
		}
	}
	key, err := verify.LoadPrivateKeyFile(*keyPath)
	if err != nil {
		return err
	}
	id, err := verify.KeyID(key.Public())
	if err != nil {
		return err
	}
	own, err := signerCounts(r, prev, id)
	if err != nil {
		return err
	}
	if _, err := r.Sign(key); err != nil {
		return err
	}
	doc, err := r.Marshal()
	if err != nil {
		return err
	}
	if err := durable.WriteFile(pos[0], doc, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "signed root version %d with key %s (%s); %d signatures\n", r.Version, id, own, len(r.Signatures))
	return nil
}

// signerCounts says whose root key id is for r, or refuses (exit 2) a key
// whose signature on r no device would count.
func signerCounts(r, prev *trust.Root, id string) (string, error) {
	var whose []string
	if r.Root.Has(id) {
		whose = append(whose, "one of its own root keys")
	}
	if prev != nil && prev.Root.Has(id) {
		whose = append(whose, fmt.Sprintf("a root key of version %d", prev.Version))
	}
	if len(whose) > 0 {
		return strings.Join(whose, ", and "), nil
	}
	for _, role := range []struct {
		name string
		r    trust.Role
	}{{"release", r.Release}, {"operator", r.Operator}} {
		if role.r.Has(id) {
			return "", usagef("key %s is a %s key of root version %d, not a root key: its signature would not count", id, role.name, r.Version)
		}
	}
	switch {
	case r.Version == 1:
		return "", usagef("key %s is not one of root version 1's root keys, and version 1 has no version before: its signature would not count", id)
	case prev != nil:
		return "", usagef("key %s is neither one of root version %d's root keys nor one of version %d's: its signature would not count", id, r.Version, prev.Version)
	}
	return fmt.Sprintf("not one of its own root keys: it counts only as a root key of version %d, which --previous would check", r.Version-1), nil
}

// rootVerify walks a chain from a trusted root as a device would.
func rootVerify(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("root verify", "--trusted OLD CHAIN...", stderr)
	trusted := fs.String("trusted", "", "the root the device holds")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if *trusted == "" || len(pos) == 0 {
		return usagef("want --trusted OLD and at least one CHAIN file")
	}
	old, err := readRootFile(*trusted)
	if err != nil {
		return err
	}
	if err := trust.Anchor(old); err != nil {
		return fmt.Errorf("--trusted %s: %w", *trusted, err)
	}
	chain, err := readChain(pos)
	if err != nil {
		return err
	}
	next, err := trust.Walk(old, chain)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "a device holding root version %d takes version %d\n", old.Version, next.Version)
	return nil
}

// rootPublish publishes a chain retained where devices take it: the chain
// must hold together (its first root signed by its own keys, each next one
// by the rule), or no device would take it.
func rootPublish(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("root publish", "--broker URL [--group G] FILE...", stderr)
	bf := addBrokerFlags(fs)
	group := fs.String("group", "", "publish to this group's root topic, not the fleet's")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	cfg, err := bf.config()
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("want at least one root FILE")
	}
	chain, err := readChain(pos)
	if err != nil {
		return err
	}
	if err := holdsTogether(chain); err != nil {
		return err
	}
	payload, err := chainDoc(chain)
	if err != nil {
		return err
	}
	topics := mqtt.Topics{Prefix: cfg.TopicPrefix}
	topic := topics.Root()
	if *group != "" {
		if err := checkName("group", *group); err != nil {
			return err
		}
		topic = topics.GroupRoot(*group)
	}
	if err := publishOnEveryNode(ctx, cfg, topic, payload, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "published root versions %d to %d on %s (retained)\n", chain[0].Version, chain[len(chain)-1].Version, topic)
	return nil
}

// holdsTogether refuses a chain no device could walk: its first root
// signed by its own root keys, each next one by the chain rule.
func holdsTogether(chain []*trust.Root) error {
	if err := trust.Anchor(chain[0]); err != nil {
		return err
	}
	if len(chain) > 1 {
		if _, err := trust.Walk(chain[0], chain[1:]); err != nil {
			return err
		}
	}
	return nil
}

// chainDoc is a chain as one JSON array, oldest first.
func chainDoc(chain []*trust.Root) ([]byte, error) {
	docs := make([]string, len(chain))
	for i, r := range chain {
		b, err := r.Marshal()
		if err != nil {
			return nil, err
		}
		docs[i] = string(b)
	}
	return []byte("[" + strings.Join(docs, ",") + "]"), nil
}

// rootAttach writes an envelope carrying the chain its offer needs
// (docs/contract/trust.md): a device that lacks the newest root takes it
// from the offer itself.
func rootAttach(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("root attach", "--chain FILE[,...] ENVELOPE", stderr)
	files := fs.String("chain", "", "root documents or chains, separated by commas")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if *files == "" || len(pos) != 1 {
		return usagef("want --chain FILE[,...] and one ENVELOPE")
	}
	chain, err := readChain(strings.Split(*files, ","))
	if err != nil {
		return err
	}
	if err := holdsTogether(chain); err != nil {
		return err
	}
	doc, err := chainDoc(chain)
	if err != nil {
		return err
	}
	raw, err := verify.ReadEnvelopeFile(pos[0])
	if err != nil {
		return err
	}
	out, err := verify.AttachRoot(raw, doc)
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	_, err = stdout.Write(append(out, '\n'))
	return err
}
