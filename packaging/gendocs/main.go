// Command gendocs writes otad's and otactl's man pages and their bash, zsh
// and fish completions from the programs' own command tables (device.Manual,
// operator.Manual): `make deb` runs it, so what is packaged cannot lag the
// commands (issue 31). The layout under -out is the one packaging/*.yaml
// read: man/otad.8, man/otactl.1, man/otasim.1, bash/NAME, zsh/_NAME, fish/NAME.fish.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/otad/otad/device"
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/operator"
	"github.com/otad/otad/sim"
)

func main() {
	out := flag.String("out", "bin/docs", "directory to write into")
	version := flag.String("version", "devel", "the version the pages name")
	flag.Parse()
	if err := run(context.Background(), *out, *version); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}

// Files maps each file under -out to what writes it.
func files(ctx context.Context, version string) (map[string]func(*os.File) error, error) {
	fs := map[string]func(*os.File) error{}
	for _, mk := range []func(context.Context, string) (cli.Manual, error){device.Manual, operator.Manual, sim.Manual} {
		m, err := mk(ctx, version)
		if err != nil {
			return nil, err
		}
		fs[filepath.Join("man", m.Name+"."+m.Section)] = func(f *os.File) error { return m.Man(f) }
		for shell, name := range map[string]string{"bash": m.Name, "zsh": "_" + m.Name, "fish": m.Name + ".fish"} {
			fs[filepath.Join(shell, name)] = func(f *os.File) error { return m.Completion(f, shell) }
		}
	}
	return fs, nil
}

func run(ctx context.Context, out, version string) error {
	fs, err := files(ctx, version)
	if err != nil {
		return err
	}
	for name, write := range fs {
		path := filepath.Join(out, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := write(f); err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}
