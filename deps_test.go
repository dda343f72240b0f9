package otad_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/otad/otad"

// deps maps each package of the module (tests left out) to everything it
// imports, directly or not, as `go list` reports it.
func deps(t *testing.T, patterns ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}"}, patterns...)
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

// TestDependenciesPointInward enforces the dependency rule of the layout:
// the parts (verification, slots, payloads, bootloaders, transport, rollouts,
// the vocabulary, the fleet view) know nothing of the agent, the daemon's
// assembly, the commands or the benchmarks; the agent knows only the
// vocabulary; the vocabulary only the standard library.
func TestDependenciesPointInward(t *testing.T) {
	rules := []struct {
		dir    string
		forbid []string
	}{
		{"ota", []string{""}}, // "" is the whole module
		{"agent", []string{"verify", "slots", "payload", "bootctl", "mqtt", "rollout", "fleetview", "internal", "cmd", "bench"}},
	}
	for _, part := range []string{"verify", "slots", "payload", "bootctl", "mqtt", "rollout", "fleetview", "tlsfiles", "durable"} {
		rules = append(rules, struct {
			dir    string
			forbid []string
		}{part, []string{"agent", "internal", "cmd", "bench"}})
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

func orModule(f string) string {
	if f == "" {
		return "anything else of the module"
	}
	return f + "/"
}

// TestOperatorCLIShipsNoDevice: otactl runs on an operator's machine; it must
// not carry a bootloader backend, the slot writer, the daemon, the device
// assembly or an embedded broker.
func TestOperatorCLIShipsNoDevice(t *testing.T) {
	forbidden := []string{
		module + "/bootctl/uboot", module + "/bootctl/grub", module + "/bootctl/sim",
		module + "/slots", module + "/agent", module + "/internal/daemon", module + "/internal/node",
		module + "/internal/simdevice", module + "/internal/demo",
		"github.com/mochi-mqtt/server", "github.com/fsnotify/fsnotify", "github.com/coreos/go-systemd",
	}
	for _, d := range deps(t, "./cmd/otactl")[module+"/cmd/otactl"] {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("otactl depends on %s", d)
			}
		}
	}
}
