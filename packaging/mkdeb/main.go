// Command mkdeb builds one of the two Debian packages (packaging/otad.yaml,
// the device's; packaging/otactl.yaml, the workstation's) for one
// architecture with nfpm as a library. It is a module of its own so that nfpm's dependency
// tree stays out of the product binaries' go.mod.
package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkdeb:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkdeb", flag.ContinueOnError)
	root := fs.String("root", ".", "repository root: the config's file paths are relative to it")
	config := fs.String("config", "packaging/otad.yaml", "nfpm config, relative to -root: packaging/otad.yaml or packaging/otactl.yaml")
	arch := fs.String("arch", "amd64", "Debian architecture: amd64, arm64, armhf")
	bin := fs.String("bin", "", "directory holding this architecture's otad, otactl and otasim (default bin/ARCH)")
	docs := fs.String("docs", "bin/docs", "the man pages and completions go run ./packaging/gendocs wrote, relative to -root")
	version := fs.String("version", "", "the version (go run ./packaging/version): the binaries' and the package's")
	out := fs.String("out", "dist", "output directory, relative to -root")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := os.Chdir(*root); err != nil {
		return err
	}
	// A native package: its version is the binaries' own, no Debian revision.
	if !nativeVersion.MatchString(*version) {
		return fmt.Errorf("-version %q: not a Debian native version (a digit first, then letters, digits and . + ~)", *version)
	}
	if *bin == "" {
		*bin = filepath.Join("bin", *arch)
	}
	when, err := sourceDate()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "mkdeb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	vars := map[string]string{"ARCH": *arch, "BIN": *bin, "DOCS": *docs, "GENERATED": tmp}
	cfg, err := nfpm.ParseFileWithEnvMapping(*config, func(k string) string { return vars[k] })
	if err != nil {
		return fmt.Errorf("%s: %w", *config, err)
	}
	info, err := cfg.Get("deb")
	if err != nil {
		return fmt.Errorf("%s: %w", *config, err)
	}
	// The config's version_schema is none: nothing else (epoch, pre-release,
	// revision) joins the version.
	info.Version, info.Release = *version, ""
	info.MTime = when
	if err := os.WriteFile(filepath.Join(tmp, "changelog"), changelog(info, when), 0o644); err != nil {
		return err
	}
	if err := expandDocGlobs(info); err != nil {
		return err
	}
	if err := rewriteDocs(info, tmp); err != nil {
		return err
	}
	if err := gzipContents(info, tmp); err != nil {
		return err
	}
	if err := nfpm.Validate(info); err != nil {
		return fmt.Errorf("%s: %w", *config, err)
	}
	path, err := writeDeb(info, *out)
	if err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}

// sourceDate is every timestamp in the package: the last commit's when the
// Makefile sets SOURCE_DATE_EPOCH (nfpm reads it too), so builds reproduce.
func sourceDate() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Now().UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// writeDeb writes the package under its conventional name in dir; a failed
// one leaves no file behind.
func writeDeb(info *nfpm.Info, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, deb.Default.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := deb.Default.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", fmt.Errorf("packaging %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return path, nil
}

// nativeVersion is Debian policy 5.6.12's version of a native package: no
// revision, so no hyphen (packaging/version makes it).
var nativeVersion = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`)

// changelog is the one-entry Debian changelog lintian asks of a package.
func changelog(info *nfpm.Info, when time.Time) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s (%s) unstable; urgency=medium\n\n", info.Name, info.Version)
	fmt.Fprintf(&b, "  * Built by make deb; the changes are in the project's git history.\n\n")
	fmt.Fprintf(&b, " -- %s  %s\n", info.Maintainer, when.Format(time.RFC1123Z))
	return b.Bytes()
}

// gzipContents compresses, as dh_compress would (gzip -9n), every file whose
// destination ends in .gz and whose source does not: man pages, the
// changelog. The config names plain sources so that they stay readable in git.
func gzipContents(info *nfpm.Info, dir string) error {
	for i, c := range info.Contents {
		if !strings.HasSuffix(c.Destination, ".gz") || strings.HasSuffix(c.Source, ".gz") || c.Source == "" {
			continue
		}
		plain, err := os.ReadFile(c.Source)
		if err != nil {
			return err
		}
		var gz bytes.Buffer
		w, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		if err != nil {
			return err
		}
		w.Write(plain)
		if err := w.Close(); err != nil {
			return err
		}
		c.Source = filepath.Join(dir, fmt.Sprintf("%d-%s", i, filepath.Base(c.Destination)))
		if err := os.WriteFile(c.Source, gz.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}
