// Command installbench is `make bench` (issue 2): it installs an image with
// the real otad binary and compares it with a plain copy measured in the same
// run on the same machine.
//
//	go run ./bench/install -otad bin/otad -size 1GiB [-rounds 3] [-dir DIR]
//
// It generates a deterministic pseudo-random image once, serves it on
// 127.0.0.1 with net/http, and lays out a file-backed device (sim bootloader,
// slot files, a trust directory with a fresh key, a signed offer). Each round
// then runs, in rotating order (after one uncounted baseline as a warm-up):
//
//   - baseline: read the image, SHA-256 it, write it to a fresh file in the
//     same directory, one final fsync — in this process, no agent;
//   - `otad install -c CFG OFFER` as a subprocess with [slots] readback = false;
//   - the same with readback at its default (on);
//   - chunked payloads (issue 10, readback off, chunked.go): the same image
//     with nothing to reuse (held against the stream install's throughput),
//     an update changing 1% of its chunks (wall time and bytes fetched), and
//     the first killed with SIGKILL at 50% of its download and started
//     again (bytes fetched in all).
//
// With -inprocess, two reference phases run slots.Write alone in this
// process (readback off and on), to tell the agent's and the process's costs
// from the writer's; -cpuprofile DIR profiles them for `go tool pprof`.
//
// Throughput is the image size over the wall time from exec to exit (the
// baseline: from open to fsync). Peak RSS is the otad process's VmHWM
// (otadrun.Install says why not wait4's maxrss). The table shows medians over the rounds (the machine is shared and
// noisy), ratios to the baseline's median, and PASS/FAIL against the targets:
// readback off at least 0.9x, on at least 0.8x, the chunked install at
// least 0.9x the stream install, otad's peak RSS at most 16 MiB. It exits 0
// when a target is missed: it is a report.
//
// Fairness choices:
//   - Source page cache (-source): "cached" (default) reads the image through
//     before every phase, so no phase reads it from storage: on a device the
//     payload comes from the network, and reading it from the disk under test
//     would compete with the slot writes being measured. "cold" drops it
//     (posix_fadvise DONTNEED) before every phase instead. Either way all
//     phases find the source in the same state.
//   - Slot B (-slot): "fallocate" (default) recreates it before every install
//     as a file of the image size with allocated, unwritten blocks: every
//     round writes freshly allocated blocks as the baseline's fresh file does,
//     and the slot is never a sparse file that grows as it is written.
//     "zeros" writes it with zeros once, so installs overwrite written blocks
//     as on a partition (cheaper for the filesystem than the baseline's
//     fresh file).
//   - Before every phase the bench calls sync(2), so no phase pays for
//     another's writeback; otad and the writer drop the slot's pages as they
//     go, the baseline's copy is unlinked after it, and each slot check drops
//     the pages it read.
package main
