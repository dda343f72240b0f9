package otad_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/otad/otad"

// deps maps each package of the module (tests left out) to everything it
// imports, directly or not, as `go list` reports it.
func deps(t *testing.T, patterns ...string) map[string][]string {
	t.Helper()
	return goList(t, "{{.ImportPath}} {{join .Deps \" \"}}", patterns...)
}

// goList maps each package `go list -f format` lists to the words after
// its import path.
func goList(t *testing.T, format string, patterns ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-f", format}, patterns...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		m[f[0]] = f[1:]
	}
	return m
}

// within reports whether pkg is dir or below it in the module.
func within(pkg, dir string) bool {
	p := module + "/" + dir
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

// The rooms of the layout (docs/design.md): the three programs' bodies, and
// the edges they are built from.
var (
	programs = []string{"device", "operator", "sim"}
	edges    = []string{"verify", "slots", "fetch", "backoff", "payload", "bootctl", "mqtt", "rollout", "fleetview", "tlsfiles", "durable", "trust", "sha256pair", "tomlkeys"}
)

// TestDependenciesPointInward enforces the dependency rule of the layout:
// the edges (verification, slots, downloads, payloads, bootloaders,
// transport, rollouts, the fleet view) know nothing of the agent or of any
// program; the agent knows only the vocabulary and durable files; the
// vocabulary only the standard library; otad's body carries no simulator
// and no operator tool; the operator's carries no device.
func TestDependenciesPointInward(t *testing.T) {
	rules := []struct {
		dir    string
		forbid []string
	}{
		{"ota", []string{""}}, // "" is the whole module
		{"agent", append([]string{"verify", "slots", "fetch", "payload", "bootctl", "mqtt", "rollout", "fleetview", "internal", "cmd", "bench"}, programs...)},
		// The fleet side (the view, rollouts) is otactl's: otad must not
		// link it (what both show, such as rates, is in ota).
		{"device", []string{"sim", "operator", "fleetview", "rollout", "internal/testkit", "bench"}},
		{"operator", []string{"device", "slots", "bootctl", "sim", "agent", "internal/testkit", "bench"}},
		{"sim", []string{"internal/testkit", "bench"}},
		// D-Bus takes the control socket's entry points (control.Handler),
		// never a path of its own into the device.
		{"device/busapi", []string{"device/daemon", "device/node", "slots", "bootctl", "mqtt"}},
	}
	for _, part := range edges {
		rules = append(rules, struct {
			dir    string
			forbid []string
		}{part, append([]string{"agent", "internal", "cmd", "bench"}, programs...)})
	}
	all := deps(t, "./...")
	for _, r := range rules {
		seen := false
		for pkg, ds := range all {
			if !within(pkg, r.dir) {
				continue
			}
			seen = true
			for _, d := range ds {
				for _, f := range r.forbid {
					if (f == "" && strings.HasPrefix(d, module+"/")) || (f != "" && within(d, f)) {
						t.Errorf("%s imports %s: %s must not depend on %s", pkg, d, r.dir, orModule(f))
					}
				}
			}
		}
		if !seen {
			t.Errorf("no package under %s/: has the layout changed? update this test", r.dir)
		}
	}
}

// imports maps each package of the module (tests left out) to what it
// imports directly.
func imports(t *testing.T, patterns ...string) map[string][]string {
	t.Helper()
	return goList(t, "{{.ImportPath}} {{join .Imports \" \"}}", patterns...)
}

// TestRolloutCoreIsPure: rollout/ is the controller's rules, pure like the
// agent (docs/design.md): no transport, no network, no fleet view, not
// even through another package; everything of a rollout that meets the
// world is rollout/controller, and only otactl's body (operator) calls
// it; tests and benchmarks aside.
func TestRolloutCoreIsPure(t *testing.T) {
	core := module + "/rollout"
	ctl := module + "/rollout/controller"
	for _, d := range deps(t, "./rollout")[core] {
		for _, f := range []string{module + "/mqtt", module + "/fleetview", ctl, "net/http", "github.com/eclipse/paho.mqtt.golang", "github.com/gorilla/websocket"} {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("rollout depends on %s: the pure core knows no transport (rollout/controller does)", d)
			}
		}
	}
	direct := imports(t, "./...")
	for _, d := range direct[core] {
		if d == "net" || strings.HasPrefix(d, "net/") {
			t.Errorf("rollout imports %s: the pure core has no network", d)
		}
	}
	n := 0
	for pkg, ims := range direct {
		if !slices.Contains(ims, ctl) {
			continue
		}
		n++
		if !within(pkg, "operator") && !within(pkg, "bench") {
			t.Errorf("%s imports rollout/controller: only operator runs the controller", pkg)
		}
	}
	if n == 0 {
		t.Error("nothing imports rollout/controller: has the layout changed? update this test")
	}
}

func orModule(f string) string {
	if f == "" {
		return "anything else of the module"
	}
	return f + "/"
}

// TestBinariesCarryOnlyTheirRoom: otactl runs on an operator's machine and
// must not carry a bootloader backend, the slot writer, the agent, the
// device's body or an embedded broker; otad must not carry the simulator
// or the operator's tools.
func TestBinariesCarryOnlyTheirRoom(t *testing.T) {
	for _, b := range []struct {
		cmd       string
		forbidden []string
	}{
		{"otactl", []string{
			module + "/bootctl", module + "/slots", module + "/agent", module + "/device", module + "/sim",
			"github.com/mochi-mqtt/server", "github.com/fsnotify/fsnotify", "github.com/coreos/go-systemd", "github.com/godbus/dbus",
		}},
		{"otad", []string{module + "/sim", module + "/operator", module + "/fleetview", module + "/rollout", module + "/internal/testkit", "github.com/mochi-mqtt/server"}},
	} {
		for _, d := range deps(t, "./cmd/"+b.cmd)[module+"/cmd/"+b.cmd] {
			for _, f := range b.forbidden {
				if d == f || strings.HasPrefix(d, f+"/") {
					t.Errorf("%s depends on %s", b.cmd, d)
				}
			}
		}
	}
}

// otadPackagesFile lists the module's packages linked into otad, one a line.
const otadPackagesFile = "testdata/otad-packages.txt"

// TestOtadLinksTheListedPackages: what otad links of the module is a
// decision, not a side effect of a helper called from the wrong package
// (device/progress.go once pulled the fleet view and the rollouts into the
// device's binary for one function): a package added to otad or dropped
// from it changes the list, which a reviewer sees in the diff.
func TestOtadLinksTheListedPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./cmd/otad").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/otad: %v", err)
	}
	var got []string
	for _, p := range strings.Fields(string(out)) {
		if p == module || strings.HasPrefix(p, module+"/") {
			got = append(got, p)
		}
	}
	slices.Sort(got)
	b, err := os.ReadFile(otadPackagesFile)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(string(b))
	if slices.Equal(got, want) {
		return
	}
	for _, p := range got {
		if !slices.Contains(want, p) {
			t.Errorf("otad links %s, which %s does not list", p, otadPackagesFile)
		}
	}
	for _, p := range want {
		if !slices.Contains(got, p) {
			t.Errorf("otad no longer links %s, which %s lists", p, otadPackagesFile)
		}
	}
	t.Errorf("if the change is meant, regenerate the list:\n\tgo list -deps ./cmd/otad | grep '^%s' | sort > %s", module, otadPackagesFile)
}

// TestInternalHoldsOnlyScaffolding: internal/ is for what no one outside
// should import, the command-line scaffolding and the test kits; the
// programs' bodies have rooms of their own.
func TestInternalHoldsOnlyScaffolding(t *testing.T) {
	entries, err := os.ReadDir("internal")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "cli" && e.Name() != "testkit" {
			t.Errorf("internal/%s: internal/ holds only cli/ and testkit/ (docs/design.md)", e.Name())
		}
	}
}

// TestMainsOnlyCall: each cmd/* is a main that hands its flags to its
// room, under 150 lines.
func TestMainsOnlyCall(t *testing.T) {
	mains, err := filepath.Glob("cmd/*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]int{}
	for _, f := range mains {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines[filepath.Dir(f)] += bytes.Count(b, []byte("\n"))
	}
	if len(lines) != 3 {
		t.Errorf("cmd/ has %d programs, want otad, otactl and otasim: %v", len(lines), lines)
	}
	for dir, n := range lines {
		if n >= 150 {
			t.Errorf("%s: %d lines; a main only parses flags and calls its room", dir, n)
		}
	}
}

// TestMemorySlotsStayInTheSimulator: the slot writer and the device's
// assembly write through slots.Target, with no branch for memory; the
// simulator's slots in memory are its own (sim/device implements the
// interface), so no product file outside sim/ defines or names one.
func TestMemorySlotsStayInTheSimulator(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "*.go").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	n := 0
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, "_test.go") || strings.HasPrefix(f, "sim/") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue // deleted in the work tree
		}
		n++
		for _, name := range []string{"memslot", "memsink", "buildmemory"} {
			if bytes.Contains(bytes.ToLower(b), []byte(name)) {
				t.Errorf("%s names %q: memory slots belong to the simulator (sim/device), the writer takes a slots.Target", f, name)
			}
		}
	}
	if n < 100 {
		t.Fatalf("read only %d product files", n)
	}
}
