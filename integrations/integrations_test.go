// Package integrations holds the Yocto layer (meta-otad) and the Buildroot
// package (buildroot/) that build otad into an image (docs/integrating.md);
// its tests hold them to the otad .deb, so the three cannot drift.
package integrations

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	debRecipe       = "../packaging/otad.yaml"
	yoctoRecipe     = "meta-otad/recipes-core/otad/otad_git.bb"
	buildrootRecipe = "buildroot/package/otad/otad.mk"
)

// An installed file: where it comes from (the .deb recipe's spelling:
// ${BIN}/otad and ${DOCS}/... for what the build makes, else a path in the
// repository), where it goes, and its mode.
type file struct {
	src, dst string
	mode     os.FileMode
	dir      bool
}

func (f file) String() string {
	if f.dir {
		return fmt.Sprintf("a directory, mode %04o", f.mode)
	}
	return fmt.Sprintf("%s, mode %04o", f.src, f.mode)
}

// debFiles reads the contents list of packaging/otad.yaml. The entries are
// nfpm's, one key a line; the man page's dst ends in .gz because mkdeb
// gzips it, which the image builds do not: the name is compared without it.
func debFiles(t *testing.T) map[string]file {
	t.Helper()
	f, err := os.Open(debRecipe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string]file{}
	var cur *file
	flush := func() {
		if cur != nil {
			if !strings.HasSuffix(cur.src, ".gz") {
				cur.dst = strings.TrimSuffix(cur.dst, ".gz")
			}
			files[cur.dst] = *cur
		}
		cur = nil
	}
	in := false
	mode := regexp.MustCompile(`mode: (0[0-7]+)`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "contents:":
			in = true
			continue
		case !in:
			continue
		case line != "" && !strings.HasPrefix(line, " "):
			in = false
			continue
		}
		entry := strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(entry, "- "); ok {
			flush()
			cur = &file{}
			entry = rest
		}
		if cur == nil {
			continue
		}
		key, val, _ := strings.Cut(entry, ": ")
		switch key {
		case "src":
			cur.src = val
		case "dst":
			cur.dst = val
		case "type":
			cur.dir = val == "dir"
		case "file_info":
			m := mode.FindStringSubmatch(val)
			if m == nil {
				t.Fatalf("%s: %q: no mode", debRecipe, line)
			}
			n, _ := strconv.ParseUint(m[1], 8, 32)
			cur.mode = os.FileMode(n)
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("%s: read only %d entries: %v", debRecipe, len(files), files)
	}
	return files
}

// imageFiles is what every image build installs: the .deb's files but
// Debian's own (packaging/debian/: lintian overrides, the copyright file, as
// an image build writes its own license manifest; the changelog mkdeb
// generates) and the Markdown manual (docs/, the operator's reading, whose
// links mkdeb rewrites for a workstation).
func imageFiles(t *testing.T) map[string]file {
	want := debFiles(t)
	for dst, f := range want {
		for _, p := range []string{"packaging/debian/", "${GENERATED}/", "docs/"} {
			if strings.HasPrefix(f.src, p) {
				delete(want, dst)
			}
		}
	}
	return want
}

// install matches one install(1) command of a recipe: -d DIR, or -D SRC DST.
var install = regexp.MustCompile(`^(?:install|\$\(INSTALL\))\s+(-D\s+|-d\s+)?-m\s+(0[0-7]+)\s+(\S+)(?:\s+(\S+))?$`)

// installs reads the install commands of a recipe's shell (line
// continuations joined) and names sources and destinations as the .deb
// recipe does, through vars (a variable not in it fails: a renamed
// variable must be looked at, not skipped).
func installs(t *testing.T, path string, vars map[string]string) map[string]file {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	ref := regexp.MustCompile(`\$[{(][^})]+[})]`)
	expand := func(s string) string {
		return ref.ReplaceAllStringFunc(s, func(v string) string {
			r, ok := vars[v]
			if !ok {
				t.Errorf("%s: %s in an install command: what does it stand for?", path, v)
			}
			return r
		})
	}
	got := map[string]file{}
	for line := range strings.Lines(text) {
		m := install.FindStringSubmatch(strings.Join(strings.Fields(line), " "))
		if m == nil {
			continue
		}
		n, _ := strconv.ParseUint(m[2], 8, 32)
		f := file{mode: os.FileMode(n)}
		if strings.TrimSpace(m[1]) == "-d" {
			f.dir, f.dst = true, expand(m[3])
		} else {
			f.src, f.dst = expand(m[3]), expand(m[4])
		}
		// A merged /usr (systemd on Buildroot and on Yocto) makes
		// /usr/lib and the .deb's /lib one directory.
		if rest, ok := strings.CutPrefix(f.dst, "/usr/lib/systemd/"); ok {
			f.dst = "/lib/systemd/" + rest
		}
		if _, dup := got[f.dst]; dup {
			t.Errorf("%s: %s installed twice", path, f.dst)
		}
		got[f.dst] = f
	}
	return got
}

func compare(t *testing.T, what string, got, want map[string]file) {
	t.Helper()
	for _, dst := range slices.Sorted(maps.Keys(want)) {
		w := want[dst]
		g, ok := got[dst]
		switch {
		case !ok:
			t.Errorf("%s does not install %s (the .deb's, from %s)", what, dst, w.src)
		case g != w:
			t.Errorf("%s installs %s as %v; the .deb as %v", what, dst, g, w)
		}
	}
	for _, dst := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[dst]; !ok {
			t.Errorf("%s installs %s, which the .deb does not", what, dst)
		}
	}
}

// TestYoctoRecipeInstallsWhatTheDebDoes: otad_git.bb's do_install puts the
// .deb's files (binary, unit, config, key directory, health check,
// completions, man page, boot scripts) where the .deb does, from the same
// sources, with the same modes.
func TestYoctoRecipeInstallsWhatTheDebDoes(t *testing.T) {
	got := installs(t, yoctoRecipe, map[string]string{
		"${B}":                      "${BUILD}",
		"${GO_BUILD_BINDIR}":        "bin",
		"${OTAD_SRC}":               ".",
		"${OTAD_CONFIG}":            "./packaging/otad.toml", // its default, for a board without a bbappend
		"${D}":                      "",
		"${bindir}":                 "/usr/bin",
		"${sysconfdir}":             "/etc",
		"${systemd_system_unitdir}": "/lib/systemd/system",
		"${libexecdir}":             "/usr/libexec",
		"${datadir}":                "/usr/share",
		"${mandir}":                 "/usr/share/man",
		"${docdir}":                 "/usr/share/doc",
	})
	compare(t, yoctoRecipe, debNames(got), imageFiles(t))
}

// TestBuildrootPackageInstallsWhatTheDebDoes: otad.mk installs the .deb's
// files but the man page and /usr/share/doc, which Buildroot's
// target-finalize deletes from every image (the boot script reaches the boot
// partition through host-uboot-tools: TestBuildrootFragmentUsesTheBootScript).
func TestBuildrootPackageInstallsWhatTheDebDoes(t *testing.T) {
	got := installs(t, buildrootRecipe, map[string]string{
		"$(@D)":         ".",
		"$(TARGET_DIR)": "",
	})
	for dst, f := range got {
		if rest, ok := strings.CutPrefix(f.src, "./bin/"); ok {
			f.src = "${BUILD}/bin/" + rest
			got[dst] = f
		}
	}
	want := imageFiles(t)
	for dst := range want {
		if strings.HasPrefix(dst, "/usr/share/man/") || strings.HasPrefix(dst, "/usr/share/doc/") {
			delete(want, dst)
		}
	}
	compare(t, buildrootRecipe, debNames(got), want)
}

// debNames spells a recipe's sources as the .deb recipe does: the build's
// binary is ${BIN}/otad, gendocs' output ${DOCS}/..., the rest a path from
// the repository root.
func debNames(got map[string]file) map[string]file {
	out := map[string]file{}
	for dst, f := range got {
		switch {
		case f.src == "${BUILD}/bin/otad":
			f.src = "${BIN}/otad"
		case strings.HasPrefix(f.src, "${BUILD}/docs/"), strings.HasPrefix(f.src, "${BUILD}/bin/docs/"):
			f.src = "${DOCS}/" + f.src[strings.Index(f.src, "docs/")+len("docs/"):]
		default:
			f.src = strings.TrimPrefix(f.src, "./")
		}
		out[dst] = f
	}
	return out
}
