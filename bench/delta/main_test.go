package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/otad/otad/internal/testkit/otadrun"
)

func TestParseDeb822(t *testing.T) {
	const text = `Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://src.example.org/debian
Suites: bookworm

Types: deb
URIs: http://disabled.example.org/debian
Suites: bookworm
Enabled: no

Types: deb
URIs: http://deb.debian.org/debian-security
Suites:
 bookworm-security
Components: main`
	got := parseDeb822(text)
	want := []aptSource{
		{uris: []string{"http://deb.debian.org/debian"}, suites: []string{"bookworm", "bookworm-updates"}},
		{uris: []string{"http://deb.debian.org/debian-security"}, suites: []string{"bookworm-security"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseDeb822 = %+v, want %+v", got, want)
	}
}

func TestParseOneLine(t *testing.T) {
	const text = `# a comment
deb http://ftp.example.org/debian bookworm main contrib
deb-src http://ftp.example.org/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.example.net/debian/ bookworm-updates main # trailing
deb [ arch=amd64 ] cdrom:/media bookworm main
deb http://broken.example.org
`
	got := parseOneLine(text)
	want := []aptSource{
		{uris: []string{"http://ftp.example.org/debian"}, suites: []string{"bookworm"}},
		{uris: []string{"http://mirror.example.net/debian/"}, suites: []string{"bookworm-updates"}},
		{uris: []string{"cdrom:/media"}, suites: []string{"bookworm"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseOneLine = %+v, want %+v", got, want)
	}
}

func TestFindMirror(t *testing.T) {
	tests := []struct {
		name    string
		sources []aptSource
		want    mirror
		wantErr string
	}{
		{"deb822 with security", []aptSource{
			{uris: []string{"http://deb.debian.org/debian"}, suites: []string{"bookworm", "bookworm-updates"}, file: "debian.sources"},
			{uris: []string{"http://deb.debian.org/debian-security"}, suites: []string{"bookworm-security"}, file: "debian.sources"},
		}, mirror{main: "http://deb.debian.org/debian", security: "http://deb.debian.org/debian-security", from: "debian.sources"}, ""},
		{"no security source: beside the mirror", []aptSource{
			{uris: []string{"cdrom:/media"}, suites: []string{"bookworm"}},
			{uris: []string{"https://ftp.example.org/debian/"}, suites: []string{"bookworm"}, file: "sources.list"},
		}, mirror{main: "https://ftp.example.org/debian", security: "https://ftp.example.org/debian-security", from: "sources.list"}, ""},
		{"backports only", []aptSource{
			{uris: []string{"http://deb.debian.org/debian"}, suites: []string{"bookworm-backports"}},
		}, mirror{}, "no apt source serves bookworm"},
		{"none", nil, mirror{}, "-mirror"},
	}
	for _, tt := range tests {
		got, err := findMirror(tt.sources, "bookworm")
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want one with %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: findMirror = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

func TestReadSources(t *testing.T) {
	root := t.TempDir()
	d := filepath.Join(root, "etc/apt/sources.list.d")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(d, "backports.sources"), "Types: deb\nURIs: http://a.example/debian\nSuites: bookworm-backports\n")
	write(filepath.Join(d, "debian.sources"), "Types: deb\nURIs: http://b.example/debian\nSuites: bookworm\n")
	write(filepath.Join(d, "other.list.disabled"), "deb http://c.example/debian bookworm main\n")
	// No sources.list: apt reads what there is.
	srcs, err := readSources(sourceFiles(root))
	if err != nil {
		t.Fatal(err)
	}
	m, err := findMirror(srcs, "bookworm")
	if err != nil || m.main != "http://b.example/debian" || m.from != filepath.Join(d, "debian.sources") {
		t.Fatalf("findMirror = %+v, %v", m, err)
	}
}

func TestParseRelease(t *testing.T) {
	const text = "Origin: Debian\nLabel: Debian\nSuite: oldstable\nVersion: 12.15\nCodename: bookworm\n" +
		"Date: Sat, 11 Jul 2026 10:16:37 UTC\nMD5Sum:\n 0ed6d4c8891eb86358b94bb35d9e4da4  1484322 contrib/Contents-all\n"
	got := parseRelease(strings.NewReader(text))
	want := release{suite: "oldstable", codename: "bookworm", version: "12.15", date: "Sat, 11 Jul 2026 10:16:37 UTC"}
	if got != want {
		t.Fatalf("parseRelease = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "bookworm 12.15 (Sat, 11 Jul 2026 10:16:37 UTC)" {
		t.Fatalf("String = %q", s)
	}
}

func TestPackagesDiff(t *testing.T) {
	old := parsePackages("installed bash 5.2.15-2+b7\ninstalled libssl3:amd64 3.0.15-1~deb12u1\nconfig-files gone 1\ninstalled tzdata 2024b-0+deb12u1\n")
	new := parsePackages("installed bash 5.2.15-2+b7\ninstalled libssl3:amd64 3.0.17-1~deb12u2\ninstalled tzdata 2025b-0+deb12u1\ninstalled extra 1\n")
	if len(old) != 3 {
		t.Fatalf("old: %v (config-files is not installed)", old)
	}
	got := diffPackages(old, new)
	want := []upgrade{{"libssl3:amd64", "3.0.15-1~deb12u1", "3.0.17-1~deb12u2"}, {"tzdata", "2024b-0+deb12u1", "2025b-0+deb12u1"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("diffPackages = %v, want %v", got, want)
	}
}

func TestMissingTools(t *testing.T) {
	look := func(name string) (string, error) {
		if name == "mkfs.ext4" {
			return "/sbin/mkfs.ext4", nil
		}
		return "", errors.New("not found")
	}
	if msg := missingTools([]tool{toolMkfsExt4}, look); msg != "" {
		t.Fatalf("all there: %q", msg)
	}
	msg := missingTools([]tool{toolMkfsExt4, toolDebootstrap, toolCasync, {"casync-http", "casync"}}, look)
	for _, want := range []string{"debootstrap, casync, casync-http not found", "apt-get install debootstrap casync (", "make deps"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

func TestCasyncAccounting(t *testing.T) {
	dir := t.TempDir()
	chunk := func(store, id string, size int) {
		p := filepath.Join(dir, store, id[:4], id+".cacnk")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	chunk("old", "aaaa0001", 100)
	chunk("old", "aaaa0002", 200)
	chunk("old", "bbbb0001", 300)
	chunk("new", "aaaa0001", 100) // kept
	chunk("new", "bbbb0001", 999) // same ID, however large its file: the seed has it
	chunk("new", "cccc0001", 4000)
	chunk("new", "cccc0002", 50)
	// A leftover that is no chunk.
	if err := os.WriteFile(filepath.Join(dir, "new", "cccc", ".cacnk.tmp"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	old, err := readCasyncStore(filepath.Join(dir, "old"))
	if err != nil {
		t.Fatal(err)
	}
	new, err := readCasyncStore(filepath.Join(dir, "new"))
	if err != nil {
		t.Fatal(err)
	}
	if len(new) != 4 {
		t.Fatalf("new store: %v", new)
	}
	got := casyncMissing(old, new)
	if want := (casyncFetch{Chunks: 4, NewChunks: 2, Bytes: 4050}); got != want {
		t.Fatalf("casyncMissing = %+v, want %+v", got, want)
	}
	if _, err := readCasyncStore(filepath.Join(dir, "absent")); err == nil {
		t.Fatal("a missing store read without an error")
	}
}

func TestHelpLists(t *testing.T) {
	help := "usage: otactl sign ...\n\nflags:\n  -chunk-size string\n    \twith --chunked: ...\n  -chunked\n    \ta chunked payload\n"
	if !helpLists(help, "chunked") || helpLists(help, "delta-from") || helpLists(help, "with") {
		t.Fatal("helpLists: wrong")
	}
	if !helpLists(help+"  -delta-from string\n    \tper-chunk deltas\n", "delta-from") {
		t.Fatal("helpLists misses -delta-from")
	}
}

func TestStatusTransfer(t *testing.T) {
	tests := []struct {
		name, doc string
		want      transfer
		wantErr   string
	}{
		{"staged target", `{"state":"staged","target":{"id":"n","path":"delta","bytes_fetched":10,"bytes_reused":20,"bytes_delta":5}}`, transfer{"delta", 10, 20, 5}, ""},
		{"settled", `{"state":"idle","last_result":{"id":"n","result":"success","bytes_fetched":7}}`, transfer{Fetched: 7}, ""},
		{"failed", `{"state":"idle","last_result":{"id":"n","result":"failure","code":"chunk_mismatch","bytes_fetched":3}}`, transfer{Fetched: 3}, "ended failure"},
		{"nothing", `{"state":"idle"}`, transfer{}, "names no install"},
	}
	for _, tt := range tests {
		var s statusDoc
		if err := json.Unmarshal([]byte(tt.doc), &s); err != nil {
			t.Fatal(err)
		}
		got, err := s.transfer()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || got != tt.want {
				t.Errorf("%s: %+v, error %v; want %+v, %q", tt.name, got, err, tt.want, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: transfer = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

func TestSizes(t *testing.T) {
	for n, want := range map[int64]string{1 << 30: "1GiB", 768 << 20: "768MiB", 12345: "12345", 3 << 10: "3KiB"} {
		if got := sizeName(n); got != want {
			t.Errorf("sizeName(%d) = %q, want %q", n, got, want)
		}
	}
	if got := windowLog(1 << 30); got != 30 {
		t.Errorf("windowLog(1GiB) = %d", got)
	}
	if got := windowLog(1<<30 + 1); got != 31 {
		t.Errorf("windowLog(1GiB+1) = %d", got)
	}
	if got := windowLog(100); got != 10 {
		t.Errorf("windowLog(100) = %d", got)
	}
	if got := xdelta3Window(5 << 30); got != 1<<31 {
		t.Errorf("xdelta3Window(5GiB) = %d", got)
	}
}

// testResult is a pair measured as the author found it: deltas at
// 1.2x xdelta3, a third of casync.
func testResult(deltaAvailable bool) *pairResult {
	sample := func(wall time.Duration, rss int64) otadrun.Sample {
		return otadrun.Sample{Wall: wall, CPU: wall / 2, PeakRSS: rss}
	}
	res := &pairResult{p: imagePair{name: "ext4"}, oldSize: 1 << 30, newSize: 1 << 30}
	res.stream = &installRow{name: "otad full (stream zstd)", samples: []otadrun.Sample{sample(10*time.Second, 9<<20)}, sent: []int64{84_600_000},
		said: transfer{Fetched: 84_600_000}}
	fresh := &installRow{name: "otad chunked, nothing to reuse", minRatio: minChunkedRatio,
		samples: []otadrun.Sample{sample(12*time.Second, 12<<20)}, sent: []int64{96_600_000}}
	chunked := &installRow{name: "otad chunked, from old", samples: []otadrun.Sample{sample(5*time.Second, 17<<20)}, sent: []int64{40_000_000},
		said: transfer{Fetched: 40_000_000, Reused: 1_000_000_000}}
	res.delta = &installRow{name: "otad with deltas, from old", samples: []otadrun.Sample{sample(4*time.Second, 10<<20)}, sent: []int64{1_920_000},
		said: transfer{Path: "delta", Fetched: 1_920_000, Delta: 1_500_000, Reused: 1_000_000_000}}
	if !deltaAvailable {
		res.delta = &installRow{name: "otad with deltas, from old", unavailable: "not available in this build"}
	}
	res.fresh = fresh
	res.installs = []*installRow{res.stream, fresh, chunked, res.delta}
	res.updates = []*installRow{res.stream, chunked, res.delta}
	res.peers = peerFigures{
		Xdelta3: peer{Name: "xdelta3 -9 -B 1GiB", Bytes: 1_600_000},
		Zstd:    peer{Name: "zstd -19 --long=30 --patch-from", Bytes: 1_900_000},
		Casync:  casyncFetch{Chunks: 16000, NewChunks: 120, Bytes: 5_900_000}, CasyncIndex: 100_000, CasyncSent: 6_100_000,
		Bsdiff: peer{Name: "bsdiff needs about 18.0 GiB (17× the old image), more than half the 9.0 GiB available"},
	}
	res.decodes = []decodeRun{{Name: "xdelta3 decode", Wall: 6 * time.Second, CPU: 5500 * time.Millisecond, PeakRSS: 1100 << 20}}
	return res
}

func TestPrintBytes(t *testing.T) {
	var b bytes.Buffer
	printBytes(&b, testResult(true))
	wantLines(t, b.String(),
		"ext4, 1073.7 MB old → 1073.7 MB new",
		"otad full (stream zstd)",
		"84.60 MB     52.88x    14.10x  server sent; otad says fetched 84.60 MB",
		"1.92 MB      1.20x     0.32x  server sent; otad says path delta, fetched 1.92 MB, delta 1.50 MB, reused 1000.00 MB",
		"6.00 MB      3.75x     1.00x  --chunk-size 16384:65536:262144: 120 of 16000 chunks new, 5.90 MB + index 0.10 MB; a real extract --seed fetched 6.10 MB",
		"targets, otad with deltas: ≤ 1.5× xdelta3: PASS (1.20x ≤ 1.50x); ≤ casync: PASS (0.32x ≤ 1.00x)",
		"bsdiff - - - bsdiff needs about 18.0 GiB (17× the old image), more than half the 9.0 GiB available",
		"chunked with nothing to reuse: 96.60 MB (index and store) against the stream's 84.60 MB: FAIL (1.14x > 1.05x)",
	)
	res0 := testResult(true)
	res0.peers.Bsdiff = peer{Name: "bsdiff 4.3", Bytes: 1_400_000}
	res0.fresh.sent = []int64{86_000_000}
	b.Reset()
	if misses := printBytes(&b, res0); len(misses) != 0 {
		t.Errorf("misses %q with every target met:\n%s", misses, b.String())
	}
	wantLines(t, b.String(),
		"bsdiff 4.3 1.40 MB 0.88x 0.23x patch; bspatch makes new of it",
		"chunked with nothing to reuse: 86.00 MB (index and store) against the stream's 84.60 MB: PASS (1.02x ≤ 1.05x)")

	res := testResult(true)
	res.p.name = roSquashfs
	res.delta.sent = []int64{7_000_000}
	b.Reset()
	printBytes(&b, res)
	if out := b.String(); strings.Contains(out, "xdelta3: PASS") || !strings.Contains(out, "≤ casync: FAIL (1.17x > 1.00x)") {
		t.Errorf("squashfs targets: only casync's, missed:\n%s", out)
	}

	b.Reset()
	printBytes(&b, testResult(false))
	if out := squeeze(b.String()); !strings.Contains(out, "otad with deltas, from old - - - not available in this build") ||
		!strings.Contains(out, "targets: otad with deltas — not available in this build") {
		t.Errorf("no delta row:\n%s", out)
	}
}

func TestPrintInstalls(t *testing.T) {
	var b bytes.Buffer
	printInstalls(&b, testResult(false), 1)
	wantLines(t, b.String(),
		"otad full (stream zstd)            10.00s    102.4     1.00x    9.0 MiB     1.00x    5.00s  RSS ≤ 16 MiB             PASS",
		"otad chunked, nothing to reuse     12.00s     85.3     0.83x   12.0 MiB     1.33x    6.00s  ≥ 0.90x, RSS ≤ 16 MiB    FAIL (throughput 0.83x < 0.90x)",
		"otad chunked, from old              5.00s    204.8     2.00x   17.0 MiB     1.89x    2.50s  RSS ≤ 16 MiB             FAIL (RSS 17.00 MiB > 16 MiB)",
		"otad with deltas, from old       not available in this build",
	)
}

func TestPrintCPU(t *testing.T) {
	var b bytes.Buffer
	if misses := printCPU(&b, testResult(true), "0"); len(misses) != 0 {
		t.Errorf("misses %q", misses)
	}
	wantLines(t, b.String(),
		"ext4: the device's cost per install (taskset -c 0; otad's medians, the decodes once)",
		"otad full (stream zstd) 10.00s 5.00s 9.0 MiB",
		"otad with deltas, from old 4.00s 2.00s 10.0 MiB",
		"xdelta3 decode 6.00s 5.50s 1100.0 MiB",
		"target, CPU of the install with deltas against the stream install's: PASS (0.40x ≤ 1.50x)")

	res := testResult(true)
	res.delta.samples[0].CPU = 8 * time.Second
	b.Reset()
	if misses := printCPU(&b, res, ""); len(misses) != 1 || !strings.Contains(misses[0], "FAIL (1.60x > 1.50x)") {
		t.Errorf("misses %q, want the CPU target's", misses)
	}
	if !strings.Contains(b.String(), "(every core;") {
		t.Errorf("unpinned run not said:\n%s", b.String())
	}
	b.Reset()
	if misses := printCPU(&b, testResult(false), "0"); len(misses) != 0 || strings.Contains(b.String(), "target") {
		t.Errorf("no delta install, yet a target: %q\n%s", misses, b.String())
	}
}

func TestBsdiffNeeds(t *testing.T) {
	if got := bsdiffNeeds(1<<30, 1<<30); got != 18<<30 {
		t.Errorf("bsdiffNeeds(1GiB, 1GiB) = %d, want 18 GiB", got)
	}
	if avail, err := memAvailable(); err != nil || avail <= 0 {
		t.Errorf("memAvailable = %d, %v", avail, err)
	}
	if why := bsdiffFits(1<<50, 1<<50); !strings.Contains(why, "more than half") {
		t.Errorf("bsdiffFits(1 PiB) = %q", why)
	}
}

func TestFailedRows(t *testing.T) {
	res := testResult(true)
	res.delta.failed = "round 1: otad install: exit status 1\notad: downloading\notad: failed: readback_mismatch: slot.chunk[7]\n"
	res.delta.failedSent = 6_650_000
	res.stream.samples, res.stream.failed = nil, "round 1: otad install: exit status 1"
	var b bytes.Buffer
	misses := printBytes(&b, res)
	misses = append(misses, printInstalls(&b, res, 1)...)
	printResult(&b, misses, nil)
	wantLines(t, b.String(),
		"otad with deltas, from old 6.65 MB - - FAILED: round 1: otad install: exit status 1 … otad: failed: readback_mismatch: slot.chunk[7]; otad says path delta, fetched 1.92 MB",
		"targets, otad with deltas: FAIL (the install failed)",
		"otad full (stream zstd) FAILED: round 1: otad install: exit status 1",
		// No ratio against a stream install that failed, and no throughput verdict.
		"otad chunked, nothing to reuse 12.00s 85.3 - 12.0 MiB - 6.00s ≥ 0.90x, RSS ≤ 16 MiB PASS",
		"RESULT: FAIL (3):",
		"- ext4: otad with deltas, from old failed: round 1: otad install: exit status 1 … otad: failed: readback_mismatch",
		"- ext4: otad full (stream zstd) failed: round 1: otad install: exit status 1",
		"- ext4: otad chunked, from old FAIL (RSS 17.00 MiB > 16 MiB)",
	)
	if strings.Contains(b.String(), "downloading") {
		t.Errorf("a failure's later lines are in the table:\n%s", b.String())
	}

	b.Reset()
	printResult(&b, nil, []string{"ext4: otad with deltas' targets: not available in this build"})
	if want := "NOT MEASURED: ext4: otad with deltas' targets: not available in this build\nRESULT: PASS (all targets measured met)\n"; b.String() != want {
		t.Errorf("all met: %q, want %q", b.String(), want)
	}
}

// wantLines checks that the report holds every want, whatever its padding.
func wantLines(t *testing.T, report string, wants ...string) {
	t.Helper()
	out := squeeze(report)
	for _, want := range wants {
		if !strings.Contains(out, squeeze(want)) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}

// squeeze collapses runs of spaces: the tests check the cells, not the padding.
func squeeze(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}
