package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// built is one package's files: installed path -> content.
type built map[string][]byte

// buildBoth makes the two packages from the repository's configs, with
// stand-ins for the binaries and for what packaging/gendocs writes (its own
// tests check those), and reads them back with dpkg-deb.
func buildBoth(t *testing.T) map[string]built {
	dpkg, err := exec.LookPath("dpkg-deb")
	if err != nil {
		t.Skip("dpkg-deb: not installed (apt-get install dpkg)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin, docs, out := filepath.Join(tmp, "bin"), filepath.Join(tmp, "docs"), filepath.Join(tmp, "dist")
	for _, f := range []string{"bin/otad", "bin/otactl", "bin/otasim"} {
		os.MkdirAll(filepath.Join(tmp, filepath.Dir(f)), 0o755)
		os.WriteFile(filepath.Join(tmp, f), []byte("#!/bin/sh\n"), 0o755)
	}
	for _, p := range []string{"otad", "otactl", "otasim"} {
		sec := map[string]string{"otad": "8"}[p]
		if sec == "" {
			sec = "1"
		}
		for _, f := range []string{"man/" + p + "." + sec, "bash/" + p, "zsh/_" + p, "fish/" + p + ".fish"} {
			os.MkdirAll(filepath.Join(docs, filepath.Dir(f)), 0o755)
			os.WriteFile(filepath.Join(docs, f), []byte(f+"\n"), 0o644)
		}
	}
	wd, _ := os.Getwd()
	defer os.Chdir(wd) // run changes to -root
	pkgs := map[string]built{}
	for _, name := range []string{"otad", "otactl"} {
		if err := run([]string{"-root", root, "-config", "packaging/" + name + ".yaml", "-arch", "amd64", "-bin", bin, "-docs", docs, "-out", out, "-version", "1.2.3"}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		deb := filepath.Join(out, name+"_1.2.3_amd64.deb")
		tarball, err := exec.Command(dpkg, "--fsys-tarfile", deb).Output()
		if err != nil {
			t.Fatalf("dpkg-deb --fsys-tarfile %s: %v", deb, err)
		}
		files := built{}
		tr := tar.NewReader(bytes.NewReader(tarball))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			files[path.Clean("/"+h.Name)] = b
		}
		pkgs[name] = files
	}
	return pkgs
}

// The device's package carries the daemon and no operator tool; the
// workstation's the operator's tools and no daemon, unit or device config;
// each has its man pages and completions for three shells.
func TestPackagesByRole(t *testing.T) {
	pkgs := buildBoth(t)
	for _, c := range []struct {
		pkg           string
		want, without []string
	}{
		{"otad", []string{"/usr/bin/otad", "/lib/systemd/system/otad.service", "/etc/otad/otad.toml", "/usr/libexec/otad/health-check",
			"/usr/share/man/man8/otad.8.gz", "/usr/share/bash-completion/completions/otad", "/usr/share/zsh/vendor-completions/_otad",
			"/usr/share/fish/vendor_completions.d/otad.fish", "/usr/share/doc/otad/copyright", "/usr/share/doc/otad/coming-from.md",
			"/usr/share/dbus-1/system.d/io.github.otad.Agent1.conf"},
			[]string{"/usr/bin/otactl", "/usr/bin/otasim", "/usr/share/man/man1/otactl.1.gz", "/usr/share/bash-completion/completions/otactl"}},
		{"otactl", []string{"/usr/bin/otactl", "/usr/bin/otasim", "/usr/share/man/man1/otactl.1.gz", "/usr/share/man/man1/otasim.1.gz",
			"/usr/share/bash-completion/completions/otactl", "/usr/share/zsh/vendor-completions/_otactl", "/usr/share/fish/vendor_completions.d/otactl.fish",
			"/usr/share/doc/otactl/copyright", "/usr/share/doc/otactl/contract/rollouts.md"},
			[]string{"/usr/bin/otad", "/lib/systemd/system/otad.service", "/etc/otad/otad.toml", "/usr/libexec/otad/health-check",
				"/usr/share/dbus-1/system.d/io.github.otad.Agent1.conf"}},
	} {
		files := pkgs[c.pkg]
		for _, f := range c.want {
			if _, ok := files[f]; !ok {
				t.Errorf("%s lacks %s", c.pkg, f)
			}
		}
		for _, f := range c.without {
			if _, ok := files[f]; ok {
				t.Errorf("%s carries %s", c.pkg, f)
			}
		}
		for f := range files {
			if strings.Contains(f, "systemd/system") && c.pkg == "otactl" {
				t.Errorf("otactl carries a unit: %s", f)
			}
		}
	}
}

var link = regexp.MustCompile(`\]\(([^)\s#]*)(#[^)\s]*)?\)`)

// Every relative link of a shipped page resolves to a file of the same
// package (a page it does not ship is linked at the project's web pages),
// and no note to the docs' writers (an HTML comment) is shipped.
func TestShippedDocsLinksResolve(t *testing.T) {
	for name, files := range buildBoth(t) {
		pages := 0
		for f, b := range files {
			if !strings.HasSuffix(f, ".md") {
				continue
			}
			pages++
			if bytes.Contains(b, []byte("<!--")) {
				t.Errorf("%s %s: ships an HTML comment", name, f)
			}
			for _, m := range link.FindAllStringSubmatch(string(b), -1) {
				target := m[1]
				if target == "" || strings.Contains(target, ":") {
					continue
				}
				if _, ok := files[path.Join(path.Dir(f), target)]; !ok {
					t.Errorf("%s %s: link %q goes nowhere in the package", name, f, target)
				}
			}
			if strings.HasSuffix(f, "/operating.md") && !bytes.Contains(b, []byte("](https://github.com/otad/otad/blob/main/docs/e2e.md#")) {
				t.Errorf("%s %s: the link to e2e.md (not shipped) is not the project's page", name, f)
			}
		}
		if pages < 10 {
			t.Errorf("%s: %d pages", name, pages)
		}
	}
}
