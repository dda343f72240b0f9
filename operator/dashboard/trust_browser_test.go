package dashboard

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/otad/otad/internal/testkit/browsertest"
	"github.com/otad/otad/internal/testkit/mosquittotest"
)

// The root of trust across the fleet (docs/contract/trust.md): each row
// says its device's root version, the chart counts devices by version, and
// a click on a version shows only its devices, so an operator sees who has
// not taken a rotation. A rotation arrives live.
func TestTrustVersionsShown(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	c := mosquittotest.Client(t, b.URL, "devices")
	pub := func(id string, seq, trust int) {
		tv := ""
		if trust > 0 {
			tv = fmt.Sprintf(`,"trust_version":%d`, trust)
		}
		st := fmt.Sprintf(`{"device":%q,"seq":%d,"state":"idle","booted_slot":"A","slots":{"A":{"version":"1.0","status":"good"}}%s}`, id, seq, tv)
		if tok := c.Publish("ota/devices/"+id+"/status", 1, true, st); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", id, tok.Error())
		}
	}
	for id, v := range map[string]int{"gw-1": 2, "gw-2": 2, "gw-3": 1, "gw-old": 0} {
		pub(id, 1, v)
	}
	url := startDashboard(t, b.URL)

	br := browsertest.Start(t, time.Minute)
	br.Run(t, 30*time.Second, "load the page", chromedp.Navigate(url))
	br.WaitFor(t, 20*time.Second, "every device in the table", `document.querySelectorAll("#device-rows tr").length === 4`)
	br.WaitFor(t, 10*time.Second, "the trust chart", `document.querySelectorAll("#chart-trust .chart-row").length === 3`)
	rows := `[...document.querySelectorAll("#device-rows tr")].map(r => r.dataset.device + "=" + r.cells[9].textContent).join(" ")`
	chart := `[...document.querySelectorAll("#chart-trust .chart-row")].map(r => r.querySelector(".chart-label").textContent + ":" + r.querySelector(".chart-count").textContent).join(" ")`
	for _, tt := range []struct{ what, expr, want string }{
		{"the root column's heading", `document.querySelector("#device-table thead tr").cells[9].textContent`, "root"},
		{"each device's root", rows, "gw-1=v2 gw-2=v2 gw-3=v1 gw-old=-"},
		{"the totals by version", chart, "v2:2 (none):1 v1:1"},
		{"the chart shown", `String(document.getElementById("chart-trust").parentElement.hidden)`, "false"},
	} {
		if got := fmt.Sprint(browsertest.Eval[any](t, br, tt.expr)); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.what, got, tt.want)
		}
	}

	// A click on v1: only the device that has not taken the rotation.
	browsertest.Eval[any](t, br, `document.querySelector('#chart-trust .chart-row[data-key="v1"]').click(), 0`)
	br.WaitFor(t, 10*time.Second, "the v1 devices", `document.querySelectorAll("#device-rows tr").length === 1`)
	if got := browsertest.Eval[string](t, br, rows); got != "gw-3=v1" {
		t.Errorf("filtered by v1: %q", got)
	}
	// It takes root 2: live, the chart moves and the filter empties.
	pub("gw-3", 2, 2)
	br.WaitFor(t, 15*time.Second, "the rotation, live", chart+` === "v2:3 (none):1" && document.querySelectorAll("#device-rows tr").length === 0`)

	// The device page says it too.
	browsertest.Eval[string](t, br, `location.hash = "device=gw-1"`)
	br.WaitFor(t, 10*time.Second, "the device page", `!document.getElementById("device").hidden && document.getElementById("device-facts").textContent.includes("root of trustv2")`)
	if p := br.Problems(); len(p) > 0 {
		t.Errorf("the page reported problems: %q", p)
	}
}
