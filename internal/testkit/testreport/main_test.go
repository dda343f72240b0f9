package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A real go test -json run of a package with a pass, a fail, a skip for a
// missing tool and another skip.
func TestReportOfARealRun(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module demo\n\ngo 1.26\n")
	write("demo_test.go", `package demo

import "testing"

func TestPasses(t *testing.T) {}
func TestFails(t *testing.T) { t.Log("the detail"); t.Fatal("it broke") }
func TestNeedsBroker(t *testing.T) { t.Skip("missing tool mosquitto (apt-get install mosquitto)") }
func TestNotRoot(t *testing.T) { t.Skip("block device tests need root") }
func TestTable(t *testing.T) {
	t.Run("sub", func(t *testing.T) { t.Skip("missing tool fw_printenv (apt-get install libubootenv-tool)") })
}
`)
	cmd := exec.Command("go", "test", "-json", "-count=1", ".")
	cmd.Dir = dir
	stream, _ := cmd.Output() // exits 1: one test fails
	var out bytes.Buffer
	r := newReport(&out)
	for _, l := range bytes.Split(bytes.TrimSpace(stream), []byte("\n")) {
		r.line(l)
	}
	if r.summary() {
		t.Error("summary says all passed")
	}
	got := out.String()
	for _, want := range []string{
		"the detail", "it broke", "--- FAIL: TestFails", "FAIL\tdemo",
		"demo TestNeedsBroker: missing tool mosquitto (apt-get install mosquitto)\n",
		"demo TestNotRoot: block device tests need root\n",
		"demo TestTable/sub: missing tool fw_printenv (apt-get install libubootenv-tool)\n",
		"apt-get install mosquitto libubootenv-tool (or make deps)\n",
		"go test: 2 passed, 1 failed, 3 skipped\n", // TestTable passes, its subtest skips
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "TestPasses") || strings.Contains(got, "=== RUN") {
		t.Errorf("report shows passing tests:\n%s", got)
	}
}

func FuzzReportLine(f *testing.F) {
	f.Add([]byte(`{"Action":"skip","Package":"p","Test":"T"}`))
	f.Add([]byte(`{"Action":"output","Package":"p","Test":"T","Output":"    x_test.go:3: missing tool a (apt-get install b)\n"}`))
	f.Add([]byte("not json"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := newReport(&bytes.Buffer{})
		r.line(b)
		r.line([]byte(`{"Action":"skip","Package":"p","Test":"T"}`))
		r.summary()
	})
}
