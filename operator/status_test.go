package operator

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/ota"
)

// Statuses of four devices, as they publish them (one does not decode).
var statusFixtures = map[string]string{
	// Back on A after 2.1 failed its health check in B.
	"gw-a": `{"device":"gw-a","seq":4,"state":"idle","booted_slot":"A","groups":["eu"],
	 "slots":{"A":{"version":"1.0","status":"good"},"B":{"version":"2.1","status":"bad"}},
	 "last_result":{"id":"rel-21","result":"failed","code":"health_check_failed"}}`,
	// Installing rel-3; its last result is rel-2's.
	"gw-b": `{"device":"gw-b","seq":9,"state":"downloading","booted_slot":"B","groups":["us"],
	 "slots":{"A":{"version":"1.0","status":"good"},"B":{"version":"2.0","status":"good"}},
	 "target":{"id":"rel-3","version":"3.0","bytes_done":50,"bytes_total":200},
	 "last_result":{"id":"rel-2","result":"success"}}`,
	"gw-c": `{"device":"gw-c",`,
	"gw-d": `{"device":"gw-d","seq":2,"state":"idle","booted_slot":"B","groups":["eu"],
	 "slots":{"A":{"version":"1.0","status":"good"},"B":{"version":"2.0","status":"good"}},
	 "last_result":{"id":"rel-2","result":"success"}}`,
}

func publishStatuses(t *testing.T, broker string, statuses map[string]string) {
	t.Helper()
	c := mosquittotest.Client(t, broker, "status-fixtures")
	for _, id := range slices.Sorted(maps.Keys(statuses)) {
		if tok := c.Publish("ota/devices/"+id+"/status", 1, true, statuses[id]); !tok.Wait() || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	c.Publish("ota/devices/gw-a/online", 1, true, `{"online":true}`).Wait()
	c.Publish("ota/devices/gw-b/online", 1, true, `{"online":false}`).Wait()
}

// tableRows maps each device row of a status table to its cells (split on
// two spaces or more) and returns what follows the table.
func tableRows(t *testing.T, out string) (rows map[string][]string, footer string) {
	t.Helper()
	table, footer, ok := strings.Cut(out, "\n\n")
	if !ok {
		t.Fatalf("no totals under the table:\n%s", out)
	}
	rows = map[string][]string{}
	lines := strings.Split(table, "\n")
	cells := regexp.MustCompile(`\s{2,}`)
	if strings.Join(strings.Fields(lines[0]), " ") != "DEVICE ONLINE STATE RUNNING BOOTED SLOT A SLOT B TARGET LAST RESULT SEQ" {
		t.Errorf("header %q", lines[0])
	}
	for _, l := range lines[1:] {
		c := cells.Split(strings.TrimSpace(l), -1)
		rows[c[0]] = c
	}
	return rows, footer
}

func TestStatusTableFiltersAndTotals(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	publishStatuses(t, b.URL, statusFixtures)
	status := func(args ...string) result {
		return mustRun(t, append([]string{"status", "--broker", b.URL, "--window", "0", "--timeout", "1s"}, args...)...)
	}

	rows, footer := tableRows(t, status().stdout)
	want := map[string][]string{
		// DEVICE ONLINE STATE RUNNING BOOTED SLOT A SLOT B TARGET LAST RESULT SEQ
		"gw-a": {"gw-a", "yes", "idle", "1.0", "A", "1.0 (good)", "2.1 (bad)", "-", "failed/health_check_failed", "4"},
		"gw-b": {"gw-b", "no", "downloading", "2.0", "B", "1.0 (good)", "2.0 (good)", "3.0 25%", "-", "9"},
		"gw-c": {"gw-c", "?", "(bad status)", "-", "-", "-", "-", "-", "-", "-"},
		"gw-d": {"gw-d", "?", "idle", "2.0", "B", "1.0 (good)", "2.0 (good)", "-", "success", "2"},
	}
	for id, w := range want {
		if !slices.Equal(rows[id], w) {
			t.Errorf("%s: %q\nwant  %q", id, rows[id], w)
		}
	}
	if len(rows) != len(want) {
		t.Errorf("%d rows", len(rows))
	}
	wantFooter := "4 devices\n" +
		"state:    2 idle, 1 bad, 1 downloading\n" +
		"running:  2 2.0, 1 1.0\n" +
		"online:   2 unknown, 1 no, 1 yes\n" +
		"failures: 1 health_check_failed\n"
	if footer != wantFooter {
		t.Errorf("totals:\n%s\nwant:\n%s", footer, wantFooter)
	}

	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"--group", "eu"}, []string{"gw-a", "gw-d"}},
		{[]string{"--device", "gw-b", "--device", "gw-c"}, []string{"gw-b", "gw-c"}},
		{[]string{"--state", "downloading"}, []string{"gw-b"}},
		{[]string{"--state", "bad"}, []string{"gw-c"}},
		{[]string{"--state", "idle", "--group", "eu", "--device", "gw-d"}, []string{"gw-d"}},
	} {
		rows, footer := tableRows(t, status(tt.args...).stdout)
		if got := slices.Sorted(maps.Keys(rows)); !slices.Equal(got, tt.want) || !strings.HasPrefix(footer, devicesLine(len(tt.want))) {
			t.Errorf("%v: rows %v, totals %q; want %v", tt.args, got, footer, tt.want)
		}
	}

	if got := status("--summary", "--group", "eu").stdout; got != "2 devices\nstate:    2 idle\nrunning:  1 1.0, 1 2.0\nonline:   1 unknown, 1 yes\nfailures: 1 health_check_failed\n" {
		t.Errorf("--summary:\n%s", got)
	}

	// --json: one object a line, every key there, whatever is known.
	var devices []map[string]any
	sc := bufio.NewScanner(strings.NewReader(status("--json").stdout))
	for sc.Scan() {
		var d map[string]any
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		devices = append(devices, d)
	}
	if len(devices) != 4 {
		t.Fatalf("%d JSON lines", len(devices))
	}
	keys := []string{"agent_version", "bad_status", "booted", "device", "groups", "last_refusal", "last_result", "online", "running", "seq", "slots", "state", "target", "time", "trust_version"}
	for _, d := range devices {
		if got := slices.Sorted(maps.Keys(d)); !slices.Equal(got, keys) {
			t.Errorf("%v: keys %v", d["device"], got)
		}
	}
	a, b2, c := devices[0], devices[1], devices[2]
	if a["device"] != "gw-a" || a["running"] != "1.0" || a["online"] != true || a["slots"].(map[string]any)["B"].(map[string]any)["status"] != "bad" ||
		a["last_result"].(map[string]any)["code"] != string(ota.CodeHealthCheckFailed) {
		t.Errorf("gw-a: %v", a)
	}
	if b2["target"].(map[string]any)["id"] != "rel-3" || b2["online"] != false || b2["state"] != "downloading" {
		t.Errorf("gw-b: %v", b2)
	}
	if c["bad_status"] == "" || c["state"] != "" || c["online"] != nil {
		t.Errorf("gw-c: %v", c)
	}

	for _, args := range [][]string{{"--state", "Idle"}, {"--json", "--summary"}, {"--device", "a/b"}, {"--group", "#"}} {
		if r := otactl(t, append([]string{"status", "--broker", b.URL}, args...)...); r.code != ota.ExitUsage {
			t.Errorf("%v: exit %d, want %d: %s", args, r.code, ota.ExitUsage, r.stderr)
		}
	}
}

func devicesLine(n int) string {
	if n == 1 {
		return "1 device\n"
	}
	return fmt.Sprintf("%d devices\n", n)
}
