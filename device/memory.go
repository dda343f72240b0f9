package device

import (
	"bufio"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Memory (issue 10: the whole otad process within 16 MiB while it installs).
//
// Most of what an idle otad holds is not heap: it is the executable's own
// pages, mapped while the packages' init functions ran (protocol buffer
// descriptors, crypto tables, type data). exePages.drop unmaps the
// read-only ones once otad has started (about 9 MiB); what runs afterwards
// maps back only the pages it uses from the page cache (mapPageByPage). The heap is kept near its live
// size: a device has no memory for the garbage of a doubling heap. 25%
// rather than 50% keeps a chunked install of a 1 GiB image (two indexes of 16k
// chunks live) 0.2 MiB lower, inside 16 MiB (make bench-delta).
const (
	gcPercent   = 25
	memoryLimit = 16 << 20 // soft, on the Go heap and runtime; the slot writer's buffers are outside it
)

func limitMemory() {
	debug.SetGCPercent(gcPercent)
	debug.SetMemoryLimit(memoryLimit)
}

// span is an address range [start, end).
type span struct{ start, end uintptr }

// exePages are the executable's read-only mappings (text and read-only data),
// found once: after the first drop each of their pages is a mapping of its
// own, and /proc/self/maps is thousands of lines long.
type exePages struct {
	spans []span
	split sync.Once
}

func newExePages() *exePages { return &exePages{spans: exeReadOnly()} }

// drop returns the heap's free pages to the system and tells the kernel this
// process no longer needs the executable's read-only mappings: MADV_DONTNEED
// unmaps them, and the next access maps the page again from the page cache.
// Only mappings that were never written are touched, so nothing is lost.
// Errors are ignored: it only saves memory.
func (p *exePages) drop() {
	// The start-up's and the offer checks' garbage, swept but kept by the
	// runtime until its background scavenger comes to it, would otherwise
	// stay beside the install's buffers. First, so that the pages this
	// collection touches are dropped too.
	debug.FreeOSMemory()
	for _, s := range p.spans {
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, s.start, s.end-s.start, unix.MADV_DONTNEED)
	}
	p.split.Do(func() { mapPageByPage(p.spans, os.Getpagesize()) })
}

// mapPageByPage makes each page of spans a mapping of its own, so that a fault
// maps only the page it needs. The kernel's fault-around maps the 16 pages
// around a faulting page of a cached file (64 KiB, fault_around_bytes) but
// stops at its mapping's ends: an install touches about 125 places in the
// executable after the drop, and 64 KiB around each was 7.1-7.6 of the 17.0
// MiB peak of make bench-delta's trixie ext4 delta install (docs/design.md,
// "Writing a slot"). Every other page is marked MADV_DONTDUMP, a flag that
// only leaves it out of a core dump (where a file's read-only pages are not
// by default), so that no two neighbours share their flags. A mapping costs
// the kernel about 200 bytes: 2,800 of them for otad's 11 MiB of text and
// read-only data, against the 4-5 MiB of pages no longer mapped. The first
// refusal (a kernel without the flag) ends it: there is nothing to undo.
func mapPageByPage(spans []span, page int) {
	p := uintptr(page)
	for _, s := range spans {
		for a := s.start + p; a+p <= s.end; a += 2 * p {
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, a, p, unix.MADV_DONTDUMP); errno != 0 {
				return
			}
		}
	}
}

// exeReadOnly lists the executable's mappings that were never written: its
// text and read-only data, as /proc/self/maps names them, neighbours merged
// (after mapPageByPage, each page is a line of its own); nil if it cannot tell.
func exeReadOnly() []span {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil
	}
	defer f.Close()
	var spans []span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 00400000-00c1c000 r-xp 00000000 fd:01 1234  /usr/bin/otad
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != exe || (fields[1] != "r-xp" && fields[1] != "r--p") {
			continue
		}
		from, to, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(from, 16, 64)
		end, err2 := strconv.ParseUint(to, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		if n := len(spans); n > 0 && spans[n-1].end == uintptr(start) {
			spans[n-1].end = uintptr(end)
			continue
		}
		spans = append(spans, span{uintptr(start), uintptr(end)})
	}
	return spans
}
