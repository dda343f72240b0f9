package device

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
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

// TestDropExePages: the executable's read-only pages leave the process's
// RSS, and the code keeps running (what it touches again comes back), also
// after a second drop, when each page is a mapping of its own.
func TestDropExePages(t *testing.T) {
	pages := newExePages()
	if len(pages.spans) == 0 {
		t.Fatal("no read-only mappings of the executable found")
	}
	for i := range 2 {
		before := rssFile(t)
		pages.drop()
		after := rssFile(t)
		if after >= before {
			t.Fatalf("drop %d: RssFile %d kB before, %d kB after", i, before, after)
		}
		if got := strings.Repeat("ok", 2); got != "okok" {
			t.Fatal("code does not run after the drop")
		}
		t.Logf("drop %d: RssFile %d kB → %d kB", i, before, after)
	}
	if again := newExePages(); !slices.Equal(again.spans, pages.spans) {
		t.Fatalf("the mappings found after the split are %v, before %v", again.spans, pages.spans)
	}
}

// rssIn sums the Rss of this process's mappings within s, in pages of page bytes.
func rssIn(t *testing.T, s span, page int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	in, kb, vmas := false, 0, 0
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			from, to, _ := strings.Cut(f[0], "-")
			a, _ := strconv.ParseUint(from, 16, 64)
			z, _ := strconv.ParseUint(to, 16, 64)
			in = uintptr(a) >= s.start && uintptr(z) <= s.end
			if in {
				vmas++
			}
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); ok && in {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			kb += n
		}
	}
	t.Logf("%d mappings, %d kB", vmas, kb)
	return kb * 1024 / page
}

// TestMapPageByPage: after mapPageByPage, touching one page of a cached file's
// read-only mapping maps that page alone, not the kernel's fault-around window
// of pages beside it, and the mapping still reads the file's bytes.
func TestMapPageByPage(t *testing.T) {
	page := os.Getpagesize()
	const pages = 64
	data := make([]byte, pages*page)
	for i := range data {
		data[i] = byte(i / page)
	}
	name := t.TempDir() + "/exe"
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mapped := func() ([]byte, span) {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		m, err := unix.Mmap(int(f.Fd()), 0, len(data), unix.PROT_READ, unix.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Munmap(m) })
		start := uintptr(unsafe.Pointer(&m[0]))
		return m, span{start, start + uintptr(len(m))}
	}

	plain, ps := mapped()
	if plain[20*page] != 20 {
		t.Fatal("the file reads wrong")
	}
	// The kernel's fault-around window (fault_around_bytes) is its own: logged, not asserted.
	t.Logf("without: %d pages mapped after touching one", rssIn(t, ps, page))

	m, s := mapped()
	mapPageByPage([]span{s}, page)
	for _, i := range []int{20, 21, 40} {
		if m[i*page+7] != byte(i) {
			t.Fatalf("page %d reads %d", i, m[i*page+7])
		}
	}
	if got := rssIn(t, s, page); got != 3 {
		t.Fatalf("touching 3 pages mapped %d", got)
	}
}
