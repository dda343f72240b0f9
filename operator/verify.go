package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/otad/otad/verify"
)

// verifyEnvelope runs checks 1-4 of docs/contract/checks.md (no device policy) and prints the manifest;
// with --payload it checks the payload's files against the manifest too, and says
// which it checked: a chunked payload's index and store, and each delta file.
func verifyEnvelope(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var pubs stringList
	fset := newFlagSet("verify", "--pub P [--pub P2] [--threshold N] [--payload PATH] FILE ('-' reads stdin)", stderr)
	fset.Var(&pubs, "pub", "trusted public key file (PEM, PKIX); repeatable")
	threshold := fset.Int("threshold", 1, "distinct trusted keys that must have signed")
	payloadPath := fset.String("payload", "", "check the payload as a device would: the file (decompressed: size and sha256), or a chunked payload's PATH.idx and PATH.store (every chunk and the image they make)")
	pos, err := parseFlags(fset, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one envelope FILE, got %d arguments", len(pos))
	}
	if len(pubs) == 0 {
		return usagef("missing --pub")
	}
	if *threshold < 1 {
		return usagef("--threshold %d: want at least 1", *threshold)
	}
	keys := make([]verify.Key, 0, len(pubs))
	for _, p := range pubs {
		k, err := verify.LoadKeyFile(p)
		if err != nil {
			return err
		}
		keys = append(keys, k)
	}
	kr := verify.NewKeyring(keys...)
	if *threshold > kr.Len() {
		return usagef("--threshold %d but only %d distinct keys given", *threshold, kr.Len())
	}

	file := pos[0]
	raw, err := verify.ReadEnvelopeFile(file)
	if err != nil {
		return err
	}
	env, err := verify.ParseEnvelope(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if err := kr.VerifyThreshold(env.Manifest, env.Signatures, *threshold); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	m, err := verify.ParseManifest(env.Manifest)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var chunked chunkedCheck
	switch {
	case *payloadPath == "":
	case m.Payload.Chunks != nil:
		if chunked, err = checkChunked(ctx, &m.Payload, *payloadPath); err != nil {
			return err
		}
	default:
		if err := checkStream(&m.Payload, *payloadPath); err != nil {
			return err
		}
	}
	// Print the signed bytes themselves (indented), unknown fields included.
	var out bytes.Buffer
	if err := json.Indent(&out, env.Manifest, "", "  "); err != nil {
		return fmt.Errorf("%s: indent manifest: %w", file, err)
	}
	out.WriteByte('\n')
	if _, err := stdout.Write(out.Bytes()); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	fmt.Fprintf(stderr, "%s: signatures OK (%d of %d trusted keys required), manifest OK\n", file, *threshold, kr.Len())
	if *payloadPath != "" {
		reportPayload(stderr, *payloadPath, m.Payload.Chunks != nil, chunked)
	}
	return nil
}

// reportPayload says which files of the payload at path verify checked: a line for
// the stream file, or for a chunked payload's index and store, then one per delta
// file.
func reportPayload(w io.Writer, path string, isChunked bool, c chunkedCheck) {
	if !isChunked {
		fmt.Fprintf(w, "%s: image size and sha256 OK\n", path)
		return
	}
	fmt.Fprintf(w, "%s.idx, %s.store: index OK, %d chunks OK, image sha256 OK\n", path, path, c.chunks)
	for _, d := range c.deltas {
		fmt.Fprintln(w, d)
	}
}
