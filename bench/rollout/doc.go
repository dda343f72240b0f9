// Command rolloutbench is `make bench-rollout` (issue 20): the rollout
// controller (a real `otactl rollout start`, built from this tree, in a
// process of its own) against a fake fleet of N devices on one mosquitto
// on 127.0.0.1 at its stock limits (-tuned-from N: rows of N devices and
// more with max_queued_messages 0, which the row says) — retained
// statuses, answers to report requests, a status naming the outcome of
// each offer, and no agents (internal/testkit/fakefleet) — for each N of
// -devices. The fake fleet takes its offers on connections of 1,000
// devices each, as each real device reads its own: one connection for all
// would meet the broker's queue for a client, not the controller's limits.
//
//	go run ./bench/rollout [-devices 20000,100000,1000000] [-tuned-from N] [-settle 0] [-dir DIR]
//
// Per row:
//
//   - state: the largest retained state the controller published, in
//     bytes (it must stay under 16 KiB whatever N);
//   - wave 1: one wave of 100% of the group, from the wave's start (its
//     state) to the arrival of the last offer at the fleet: unpaced on a
//     tuned broker (the controller told --broker-queue 0); on a stock one
//     at the fastest pace its queue of 1,000 takes, 60,000 offers a
//     minute, as the controller refuses an unpaced wave larger than the
//     queue (docs/brokers.md, a large fleet) — the row says which;
//   - controller peak RSS: the controller process's VmHWM, read from /proc
//     while it runs (not wait4's maxrss, which counts this benchmark's own
//     peak in: os/exec starts the child with vfork), the run that offered
//     everybody;
//   - rebuild: the controller killed with -9 while soaking after that
//     wave and a new one started at once (it proves the old one gone and
//     takes over without waiting out the lease): from its start
//     until it publishes a state as the new holder with every outcome
//     counted again (it read N statuses, rebuilt the counts and went on);
//     the peak RSS of that process too;
//   - paced: a second rollout of a new offer with [rate] offers_per_minute
//     N/4, increase 2, max_per_minute N (on a stock broker neither above
//     60,000): from the wave's start to the last
//     offer, and whether the offers ever ran ahead of the pace (counted at
//     the fleet, against the pace's integral and the bucket's second);
//   - mosquitto's peak RSS (VmHWM), a fresh broker per row;
//   - the clients mosquitto dropped messages for (its log's "Outgoing
//     messages are being dropped"), and its limits: stock or tuned.
//
// The targets of issue 20 are at 1,000,000 devices: state ≤ 16 KiB,
// controller ≤ 1 GiB peak RSS, a restart rebuilt in ≤ 60 s (on a stock
// broker, 60 s beyond the report window the controller takes: N/500 s, or
// N/10,000 s on a tuned one, at most 5 minutes). The run exits
// non-zero when a row's state is over 16 KiB, its paced wave ran ahead, or
// (up to 1,000,000 devices) a controller peaked over 1 GiB or the rebuild
// took over 60 s.
package main
