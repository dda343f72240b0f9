// Command fleetbench is `make bench-fleet` (issue 3): against one real
// mosquitto on 127.0.0.1 it times offers to one file-backed device (the
// latency run: sim/device, a real agent with the sim bootloader and
// slot files) and one group offer to fleets of in-memory agents in this
// process (the fleet runs: `otasim fleet`'s devices, sim/fleet). It
// exits non-zero when a fleet size's downloads per device are not exactly 1.
//
//	go run ./bench/fleet [-latency-n 200] [-agents 100,250,500] [-image-size 2MiB]
//
// Latency: one device; an image server paced far below the image size per
// second, so no install finishes during the run. After one uncounted offer
// (from idle), each of -latency-n offers is a new image with a later
// issued_at, published QoS 1 retained to the device's desired topic while
// the previous install is downloading; it supersedes that install (docs/contract/installing.md).
// The figure is the time from just before the publish to the arrival, at a
// subscriber of ota/devices/ID/events, of the event that starts downloading
// that offer: broker hops both ways, signature and checks, the journal's
// fsyncs, cancelling the running transfer, marking the slot bad.
//
// Fleet: for each size in -agents, that many in-memory devices in this
// process (otasim fleet: real agents, slots, journal and sim bootloader in
// memory; all in group "bench"; installs bounded by -max-installs) against
// a fresh mosquitto with its stock settings (but the listener); one group
// offer, published retained to ota/groups/bench/desired; the time until
// every device's status says last_result success for it, booted on slot B
// and committed (each downloads, verifies, sim-reboots, starts again,
// confirms, commits). The statuses are observed in-process as the agents
// publish them, so the figure does not depend on the broker's queue limits
// for wildcard subscriptions. The image server counts downloads per device
// (each request names its device): every device must download exactly once
// (issue 11: one offer per device); a size where one did not is marked FAIL
// and the run exits 1 after the table. Sizes run in order and stop at the
// first that does not converge within -timeout.
//
// Memory: this process's peak is its VmHWM, reset before each size
// (/proc/self/clear_refs), so each size's peak is its own; mosquitto's is
// its VmHWM (a fresh broker per size). Both are also sampled every 250 ms.
package main
