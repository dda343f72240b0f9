// Command deltabench is `make bench-delta` (issue 19): the bytes a real
// Debian update costs with otad — as one zstd stream, as a chunked payload
// and with per-chunk deltas — against xdelta3, casync and zstd
// --patch-from, and the installs' wall time and peak RSS against the stream
// install's, all in one run.
//
//	go run ./bench/delta -otad bin/otad -otactl bin/otactl [-size 1GiB] [-rounds 3] [-ro squashfs|erofs] [-rebuild] [-to trixie]
//
// The pair is built once and cached (-cache, default ~/.cache/otad-bench-delta;
// -rebuild builds it again):
//
//   - old: `debootstrap --variant=minbase` of the suite (bookworm) with a
//     gateway's packages (gatewayPackages: about 190 packages in all) from
//     the machine's Debian mirror, the one its apt sources name (-mirror
//     overrides), without the -security and -updates suites;
//   - new: a copy of old with those suites added and `apt-get upgrade` run
//     in a chroot (no service started): the monthly update. The packages
//     it upgraded are printed.
//
// -to RELEASE builds a second pair with a larger step, cached beside the first
// (CACHE/SUITE-to-RELEASE): the same old tree, and new = old with its sources
// naming RELEASE, RELEASE-updates and RELEASE-security and `apt-get
// full-upgrade` run, the release upgrade Debian's release notes describe
// (-to trixie: bookworm 12.15 to trixie 13.8, 169 of 189 packages upgraded,
// 213 installed after). The machine's mirror lists one version of each
// package per suite (apt-cache madison: bookworm, bookworm-updates,
// bookworm-security), so no older point release can be rebuilt from it; a
// release upgrade is the larger real step it offers.
//
// Each tree is rendered fresh on each side, as a real build does (files land
// where this build puts them): an ext4 of -size bytes (mkfs.ext4 -d) and a
// squashfs (mksquashfs -comp zstd; -ro erofs: mkfs.erofs -zlz4hc). Building
// needs root (debootstrap, chroot, mount), debootstrap and a mirror that
// answers; without them the bench says what is missing and exits non-zero.
//
// For each image pair the real otactl signs the new image as a zstd stream,
// as a chunked payload (fixed and content-defined chunks when its sign takes
// --chunking) and with --delta-from the old image (when its sign takes
// --delta-from; else that row says "not available in this build"), with a
// key from `otactl keygen`. The files are served on 127.0.0.1 by a server
// that counts the bytes it sends. A file-backed device (sim/device) installs
// the old image from a chunked payload, boots it and commits it, as an
// update would have left it; every measured install starts from that saved
// state with a freshly allocated target slot, is checked byte for byte
// against the new image afterwards, and reports both what the server sent
// and what otad says it fetched, reused and took as deltas (its status).
// A second device, with nothing in its booted slot, installs the chunked
// payload with nothing to reuse: its bytes against the stream's (issue 30:
// at most 1.05x). Installs run -rounds times in rotating order, pinned to
// -cpus (taskset -c, default 0: one core, as a device has); wall time is
// from exec to exit and CPU from wait4 (medians), peak RSS otad's VmHWM
// (the largest).
//
// The peers, each checked to decode to the new image: `xdelta3 -9` with a
// source window over the whole old image; `zstd -19 --long --patch-from`;
// Debian's bsdiff where it fits in memory (about 17x the old image, within
// half of what is available; else its row says why);
// casync with stores of both images (64 KiB average chunks, zstd): the
// chunks of the new store the old one lacks, by their compressed size, plus
// the index — what `casync extract --seed=OLD` fetches, which a real
// extract over HTTP from the counting server confirms. Their figures depend
// on the images only and are cached beside them, with the xdelta3 and
// bsdiff patches: every run times their own decodes (xdelta3 -d, bspatch)
// on the installs' cores — wall time, CPU, peak RSS — beside otad's stream
// install and its install with deltas.
//
// Targets (issues 19 and 30): otad with deltas at most 1.5x xdelta3 on ext4
// and at most casync on every pair; the chunked install with nothing to
// reuse at least 0.9x the stream install's throughput, and its bytes at
// most 1.05x the stream's; the install with deltas' CPU at most 1.5x the
// stream install's; peak RSS at most 16 MiB in every install. Misses are marked FAIL; the bench exits 0 (it is a
// report).
package main
