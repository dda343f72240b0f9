package rollout

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A plan with several mistakes names each of them at once, the unknown
// keys among them, and the offer file that is missing.
func TestPlanNamesEveryMistake(t *testing.T) {
	const plan = `name = "fw.4"
offer = "missing.json"
group = "g"
colour = "red"
[[wave]]
percent = 20
[[wave]]
percent = 10
soak = "forever"
[[wave]]
devices = ["a", "a"]
[halt]
max_failed_percent = 101
`
	dir := t.TempDir()
	path := filepath.Join(dir, "p.toml")
	if err := os.WriteFile(path, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadPlan(path)
	if err == nil {
		t.Fatal("accepted")
	}
	var keys []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var pe *PlanError
		if !errors.As(e, &pe) {
			t.Fatalf("%v is not a PlanError", e)
		}
		keys = append(keys, pe.Key)
	}
	want := []string{"", "name", "wave[2].percent", "wave[2].soak", "wave[3].devices", "halt.max_failed_percent", "offer"}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("keys %q, want %q\n%v", keys, want, err)
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != len(want) || !strings.Contains(lines[0], "unknown key colour (line 4)") {
		t.Errorf("error:\n%v", err)
	}
}
