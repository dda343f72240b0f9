package device

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func rssFile(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}

// TestDropStartupPages: the executable's read-only pages leave the process's
// RSS, and the code keeps running (what it touches again comes back).
func TestDropStartupPages(t *testing.T) {
	before := rssFile(t)
	dropStartupPages()
	after := rssFile(t)
	if after >= before {
		t.Fatalf("RssFile %d kB before, %d kB after", before, after)
	}
	if got := strings.Repeat("ok", 2); got != "okok" {
		t.Fatal("code does not run after the drop")
	}
	t.Logf("RssFile %d kB → %d kB", before, after)
}
