package device

import (
	"bufio"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Memory (issue 10: the whole otad process within 16 MiB while it installs).
//
// Most of what an idle otad holds is not heap: it is the executable's own
// pages, mapped while the packages' init functions ran (protocol buffer
// descriptors, crypto tables, type data). dropStartupPages unmaps the
// read-only ones once otad has started (about 9 MiB); what runs afterwards
// maps back what it uses from the page cache (an install, about 7 MiB). The heap is kept near its live
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

// dropStartupPages returns the heap's free pages to the system and tells the
// kernel this process no longer needs the executable's read-only mappings
// (text and read-only data): MADV_DONTNEED unmaps them, and the next access
// maps the page again from the page cache. Only mappings that were never written are touched, so nothing is
// lost. Errors are ignored: it only saves memory.
func dropStartupPages() {
	// The start-up's and the offer checks' garbage, swept but kept by the
	// runtime until its background scavenger comes to it, would otherwise
	// stay beside the install's buffers. First, so that the pages this
	// collection touches are dropped too.
	debug.FreeOSMemory()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
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
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_DONTNEED)
	}
}
