package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/otad/otad/verify"
)

func keygen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("keygen", "[--type ecdsa-p256|ed25519|rsa-3072] NAME", stderr)
	kind := fset.String("type", verify.KeyECDSAP256, "key type: ecdsa-p256, ed25519 or rsa-3072")
	pos, err := parseFlags(fset, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] == "" {
		return usagef("want exactly one NAME, got %d arguments", len(pos))
	}
	name := pos[0]
	switch *kind {
	case verify.KeyECDSAP256, verify.KeyEd25519, verify.KeyRSA3072:
	default:
		return usagef("--type %q: want ecdsa-p256, ed25519 or rsa-3072", *kind)
	}
	keyPath, pubPath := name+".key", name+".pub"
	// Never overwrite a key: losing a signing key is not undoable.
	for _, p := range []string{keyPath, pubPath} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s already exists; not overwriting it", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", p, err)
		}
	}

	key, err := verify.GenerateKey(*kind)
	if err != nil {
		return err
	}
	privPEM, err := verify.MarshalPrivateKeyPEM(key)
	if err != nil {
		return err
	}
	pubPEM, err := verify.MarshalPublicKeyPEM(key.Public())
	if err != nil {
		return err
	}
	id, err := verify.KeyID(key.Public())
	if err != nil {
		return err
	}
	if err := writeNewFile(keyPath, privPEM, 0o600); err != nil {
		return err
	}
	if err := writeNewFile(pubPath, pubPEM, 0o644); err != nil {
		_ = os.Remove(keyPath) // no half pair left behind
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (private, keep it secret) and %s\nkeyid %s\n", keyPath, pubPath, id)
	return nil
}

// writeNewFile creates path exclusively with perm, writes b and syncs it.
func writeNewFile(path string, b []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}
