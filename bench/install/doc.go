// Command installbench is `make bench` (issues 2 and 33): it installs an
// image with the real otad binary and holds each install against the ideal
// pipeline of the same payload, measured in the same run on the same machine.
//
//	go run ./bench/install -otad bin/otad -size 1GiB [-rounds 3] [-dir DIR] [-before OLD] [-rows REGEXP]
//
// It generates a deterministic pseudo-random image once, writes its zstd
// payload (2 MiB window, as otactl) and a stored xz payload (LZMA2
// uncompressed chunks, xzstore.go: what xz writes for random data, in a
// second), serves them on 127.0.0.1 with net/http, and lays out a file-backed
// device (sim bootloader, slot files, a trust directory with a fresh key,
// signed offers). Every row runs four ways: read-back off and on, on every
// core and pinned to CPU 0 (taskset -c 0: a one-core device's view). Each
// round runs, in rotating order (after one uncounted ideal as a warm-up):
//
//   - ideal, per payload kind (ideal.go): read the payload from the page
//     cache, decompress it with the writer's decoder, SHA-256, write slot B
//     with O_DIRECT in 1 MiB units, fdatasync; with read-back, then read slot
//     B back with O_DIRECT and hash it again — on one locked thread, in this
//     process;
//   - `otad install -c CFG OFFER` of the raw, zstd and xz stream payloads as
//     a subprocess, [slots] readback false and true;
//   - with -before OLD, the same stream and chunked installs by another otad
//     binary (an older build), for a before/after comparison in the same
//     rounds;
//   - chunked payloads (issue 10, chunked.go): the same image with nothing to
//     reuse (held against the raw ideal), an update changing 1% of its
//     chunks (wall time and bytes fetched), and the first killed with
//     SIGKILL at 50% of its download and started again (bytes fetched in
//     all); the last two read-back off on every core.
//
// With -link-mbit, -link-delay, -link-loss and -link-reset the payloads are
// served through an emulated slow, lossy link (internal/testkit/linktest: a
// rate, latency each way, losses as the stalls TCP's retransmissions cost,
// resets that make otad resume): issue 30's 10 Mbit/s, 100 ms, 1% loss is
// -link-mbit 10 -link-delay 50ms -link-loss 1. Peak RSS is then the figure
// that matters; throughput is the link's, and -rows picks the rows, as a
// slow link makes every install long. The rate is each connection's
// (linktest.Shape): a chunked install's three range requests in flight, each
// on its own HTTP/1.1 connection, get three times it. -https serves the
// payloads over TLS, offering HTTP/2 as an update server does (otad fetches
// over HTTP/1.1 all the same: fetch/client.go says why).
//
// An otad binary linked dynamically (built with cgo, as `go build` does where
// a C compiler is found) maps the C library, about 1.3 MiB more peak RSS than
// the static binary `make build` ships: the bench warns of it on stderr.
//
// -rows 'stream zstd' runs only the rows whose name matches (and the
// ideals they are held against): one question at a time.
//
// With -inprocess, two reference phases run slots.Write alone in this
// process (readback off and on), to tell the agent's and the process's costs
// from the writer's; -cpuprofile DIR profiles them for `go tool pprof`.
//
// Throughput is the image size over the wall time from exec to exit (the
// ideal: from open to fdatasync). User and system CPU are reported per GiB
// of image. Peak RSS is the otad process's VmHWM (otadrun.Install says why
// not wait4's maxrss). The table shows medians over the rounds (the machine
// is shared and noisy), each install's ratio to its ideal's median (same
// kind, read-back and cores; raw for chunked), and PASS/FAIL against the
// targets: at least 0.9x on every core, read-back off and on, and otad's
// peak RSS at most 16 MiB; pinned rows have no throughput target. It exits 0
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
//     round writes freshly allocated blocks, and the slot is never a sparse
//     file that grows as it is written. "zeros" writes it with zeros once,
//     so installs overwrite written blocks as on a partition.
//   - Before every phase the bench calls sync(2), so no phase pays for
//     another's writeback; otad and the writer drop the slot's pages as they
//     go, the ideal writes with O_DIRECT, and each slot check drops the pages
//     it read.
package main
