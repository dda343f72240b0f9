package integrations

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/testtool"
)

// pinnedVersion is what a build of the pinned commit by a build system
// prints (docs/contract/packaging.md): the VERSION file's, +g and the
// commit's first 12 hex digits.
func pinnedVersion(t *testing.T) (rev, want string) {
	t.Helper()
	rev = recipeVar(t, "meta-otad/recipes-core/otad/otad-source.inc", "SRCREV")
	b, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if len(rev) < 12 {
		t.Fatalf("SRCREV %q: not a commit hash", rev)
	}
	return rev, strings.TrimSpace(string(b)) + "+g" + rev[:12]
}

// sourceTree is the repository as a build system unpacks it: no .git (the
// files are this tree's, linked, so the test builds what is checked out).
func sourceTree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "otad")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case ".git", "bin", "dist":
			continue
		}
		abs, err := filepath.Abs(filepath.Join("..", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goEnv: offline, from the local module cache, no C (the build systems
// have their own toolchains; the version does not depend on them).
func goEnv() []string {
	return append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0", "GOWORK=off")
}

// checkBuild: the binary and the man page the build made name want.
func checkBuild(t *testing.T, what, otad, man, want string) {
	t.Helper()
	out, err := exec.Command(otad, "--version").CombinedOutput()
	if got := strings.TrimSpace(string(out)); err != nil || got != "otad "+want {
		t.Errorf("%s: otad --version = %q, %v; want %q", what, got, err, "otad "+want)
	}
	page, err := os.ReadFile(man)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !strings.Contains(string(page), want) {
		t.Errorf("%s: the man page does not name the version %s", what, want)
	}
}

// TestBuildrootBuildPrintsTheVersion runs otad.mk's build step as
// Buildroot's golang-package does (the pre-build hooks, go build with
// -ldflags "$(OTAD_LDFLAGS)", the post-build hooks) in a tree without .git:
// otad --version and the man page say the VERSION file's version and the
// pinned commit, as packaging/version -commit does; with
// OTAD_OVERRIDE_SRCDIR (a checkout, OTAD_VERSION "custom"), what make says
// in that checkout.
func TestBuildrootBuildPrintsTheVersion(t *testing.T) {
	t.Parallel()
	mk := testtool.Require(t, "make", "make")
	mkfile, err := filepath.Abs(buildrootRecipe)
	if err != nil {
		t.Fatal(err)
	}
	// The parts of Buildroot's package infrastructure otad.mk uses.
	stub := `define sep


endef
github = https://github.com/$(1)/$(2)/archive/$(3)
golang-package =
HOST_GO_HOST_ENV = GOOS= GOARCH=
GO_BIN = go
include ` + mkfile + `
# pkg-golang.mk's build command for OTAD_BUILD_TARGETS.
OTAD_BUILD_OPTS = -ldflags "$(OTAD_LDFLAGS)" -trimpath -buildvcs=false
$(D)/.stamp_built:
	$(foreach hook,$(OTAD_PRE_BUILD_HOOKS),$(call $(hook))$(sep))
	cd $(@D); $(GO_BIN) build -v $(OTAD_BUILD_OPTS) -o $(@D)/bin/otad $(OTAD_GOMOD)/$(OTAD_BUILD_TARGETS)
	$(foreach hook,$(OTAD_POST_BUILD_HOOKS),$(call $(hook))$(sep))
$(D)/.stamp_version:
	$(foreach hook,$(OTAD_PRE_BUILD_HOOKS),$(call $(hook))$(sep))
`
	stubfile := filepath.Join(t.TempDir(), "Makefile")
	if err := os.WriteFile(stubfile, []byte(stub), 0o644); err != nil {
		t.Fatal(err)
	}
	_, want := pinnedVersion(t)
	src := sourceTree(t)
	cmd := exec.Command(mk, "-f", stubfile, "D="+src, src+"/.stamp_built")
	cmd.Env = goEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Buildroot's build step with otad.mk: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "otad-version")); strings.TrimSpace(string(b)) != want {
		t.Errorf("otad.mk's version: %q, want %q", b, want)
	}
	checkBuild(t, "Buildroot", filepath.Join(src, "bin", "otad"), filepath.Join(src, "bin", "docs", "man", "otad.8"), want)

	// OTAD_OVERRIDE_SRCDIR: the checkout's own version.
	root, _ := filepath.Abs("..")
	pv := exec.Command("go", "run", "./packaging/version")
	pv.Dir, pv.Env = root, goEnv()
	checkout, err := pv.Output()
	if err != nil {
		t.Fatalf("go run ./packaging/version: %v", err)
	}
	src = sourceTree(t)
	cmd = exec.Command(mk, "-f", stubfile, "D="+src, "OTAD_OVERRIDE_SRCDIR="+root, "OTAD_VERSION=custom", src+"/.stamp_version")
	cmd.Env = goEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("otad.mk's version hook with OTAD_OVERRIDE_SRCDIR: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "otad-version")); string(b) != string(checkout) {
		t.Errorf("otad.mk's version with OTAD_OVERRIDE_SRCDIR: %q, want the checkout's %q", b, checkout)
	}
}

// shellFunc is the body of a recipe's shell function (name() { ... }).
func shellFunc(t *testing.T, recipe []byte, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?ms)^` + regexp.QuoteMeta(name) + `\(\) \{\n(.*?)^\}`).FindSubmatch(recipe)
	if m == nil {
		t.Fatalf("%s: no %s()", yoctoRecipe, name)
	}
	return string(m[1])
}

// TestYoctoBuildPrintsTheVersion runs otad_git.bb's do_compile as bitbake
// does (the prepend, go_do_compile's link with GO_EXTRA_LDFLAGS in
// GO_LDFLAGS' -ldflags="...", the append) in a tree without .git: otad
// --version and the man page say the VERSION file's version and SRCREV, as
// packaging/version -commit does.
func TestYoctoBuildPrintsTheVersion(t *testing.T) {
	t.Parallel()
	bash := testtool.Require(t, "bash", "bash")
	bb, err := os.ReadFile(yoctoRecipe)
	if err != nil {
		t.Fatal(err)
	}
	rev, want := pinnedVersion(t)
	src := sourceTree(t)
	b := filepath.Join(t.TempDir(), "build")
	script := "set -e\n" + shellFunc(t, bb, "do_compile:prepend") +
		"${GO} build -trimpath -ldflags=\"${GO_EXTRA_LDFLAGS}\" -o ${B}/${GO_BUILD_BINDIR}/otad ${GO_IMPORT}/cmd/otad\n" +
		shellFunc(t, bb, "do_compile:append")
	vars := map[string]string{
		"${GO_EXTRA_LDFLAGS}": recipeVar(t, yoctoRecipe, "GO_EXTRA_LDFLAGS"),
		"${GO}":               "go",
		"${GO_IMPORT}":        recipeVar(t, yoctoRecipe, "GO_IMPORT"),
		"${OTAD_SRC}":         src,
		"${SRCREV}":           rev,
		"${B}":                b,
		"${GO_BUILD_BINDIR}":  "bin",
		"${BUILD_GOOS}":       runtime.GOOS,
		"${BUILD_GOARCH}":     runtime.GOARCH,
	}
	script = regexp.MustCompile(`\$\{[A-Za-z_:]+\}`).ReplaceAllStringFunc(script, func(v string) string {
		r, ok := vars[v]
		if !ok {
			t.Errorf("%s: %s in do_compile: what does it stand for?", yoctoRecipe, v)
		}
		return r
	})
	if strings.Contains(script, "${") {
		t.Fatalf("%s: do_compile keeps a bitbake expression:\n%s", yoctoRecipe, script)
	}
	cmd := exec.Command(bash, "-c", script)
	cmd.Dir, cmd.Env = src, goEnv() // do_compile's directory: ${B}/src/${GO_IMPORT}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("otad_git.bb's do_compile: %v\n%s\n%s", err, script, out)
	}
	checkBuild(t, "Yocto", filepath.Join(b, "bin", "otad"), filepath.Join(b, "docs", "man", "otad.8"), want)
}

// TestYoctoPackageVersionIsTheVersionFiles: the recipe's PV is the pinned
// commit's VERSION file, +git (integrations/pin writes it), so the image's
// package names the release line the binary prints.
func TestYoctoPackageVersionIsTheVersionFiles(t *testing.T) {
	rev := recipeVar(t, "meta-otad/recipes-core/otad/otad-source.inc", "SRCREV")
	v, err := exec.Command("git", "show", rev+":VERSION").Output()
	if err != nil {
		// No history (a release tarball): this tree's, which
		// TestPinnedCommitsAgree holds to the pinned commit's go.mod.
		if v, err = os.ReadFile("../VERSION"); err != nil {
			t.Fatal(err)
		}
	}
	if pv, want := recipeVar(t, "meta-otad/recipes-core/otad/otad-source.inc", "PV"), strings.TrimSpace(string(v))+"+git"; pv != want {
		t.Errorf("otad-source.inc: PV = %q, want %q (the VERSION file at SRCREV %s, +git; integrations/pin writes it)", pv, want, rev)
	}
}
