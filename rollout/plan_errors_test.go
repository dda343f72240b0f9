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

// A value of the wrong type is a mistake like the others: it names the key
// as the other errors do (the wave's number), its line, what the key wants
// and what the file gives, in the plan's words, not go-toml's Go types;
// and the mistakes after it are named too.
func TestPlanNamesEveryTypeMistake(t *testing.T) {
	const plan = `name = "fw.4"
offer = "o.json"
group = 7
[[wave]]
percent = "10"
[[wave]]
devices = ["gw-1", 2]
soak = 30
[[wave]]
percent = 50
[halt]
max_failed_percent = "5"
min_outcomes = 2.5
device_timeout = true
[rate]
offers_per_minute = [100]
`
	_, err := ParsePlan([]byte(plan), "p.toml")
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{
		`rollout plan p.toml: name: "fw.4": 1 to 64 of [A-Za-z0-9_-]`,
		`rollout plan p.toml: group: line 3: a string in quotes, not a whole number`,
		`rollout plan p.toml: wave[1].percent: line 5: a number, not a string: write 10 without the quotes`,
		`rollout plan p.toml: wave[2].devices: line 7: a list of device names in quotes; item 2 is a whole number`,
		`rollout plan p.toml: wave[2].soak: line 8: a duration in quotes (like "30m" or "2h"), not a whole number: write "30s"`,
		`rollout plan p.toml: halt.max_failed_percent: line 12: a number, not a string: write 5 without the quotes`,
		`rollout plan p.toml: halt.min_outcomes: line 13: a whole number, not a number with a fraction`,
		`rollout plan p.toml: halt.device_timeout: line 14: a duration in quotes (like "30m" or "2h"), not true or false`,
		`rollout plan p.toml: rate.offers_per_minute: line 16: a number, not a list`,
	}
	if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("error:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		if _, ok := errors.AsType[*PlanError](e); !ok {
			t.Errorf("%v is not a PlanError", e)
		}
	}
}

// A table written as a value stops the decoding (go-toml cannot go on);
// it is still named with its line, in the plan's words.
func TestPlanNamesAMistypedTable(t *testing.T) {
	for plan, want := range map[string]string{
		"name = \"r\"\nhalt = 5\n":     `rollout plan p.toml: halt: line 2: a table ([halt]), not a whole number`,
		"name = \"r\"\nwave = \"x\"\n": `rollout plan p.toml: wave: line 2: [[wave]] tables, not a string`,
	} {
		if _, err := ParsePlan([]byte(plan), "p.toml"); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %s", plan, err, want)
		}
	}
}
