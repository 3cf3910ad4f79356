// Package drill runs a fault drill against a Cell cluster: a YCSB-style
// workload whose every operation is recorded, faults struck on a schedule,
// and, after the faults are healed and the cluster has recovered, the
// checks of what the history allows.
//
// # The run
//
// Run preloads every key of the workload (one acknowledged put each), then
// drives the workload's clients while a Schedule strikes a Target: at each
// fault time it picks a server (the host of the region holding the most
// drill keys, a random one, or a named one) and calls Target.Fault; at the
// matching heal time Target.Heal. After the last heal the load goes on for
// the schedule's tail, stops, and Run waits for recovery: every key is read
// until each read succeeds, within Options.RecoveryTimeout. Those final
// reads close the history.
//
// # The history
//
// Every operation is an Op: client, kind, key, the value written or read,
// its invoke and return times (monotonic, since the run's start) and its
// Outcome. The client's error contract decides the outcome (client.Put):
// a write that returns client.ErrOutcomeUnknown may or may not have been
// applied (Unknown); any other error means it was not (Failed); a read that
// fails had no effect (Failed). A write that took effect in spite of a
// Failed outcome is a broken contract, and the checks report it.
//
// # The checks
//
//   - Durability (CheckDurability): the final read of every key returns a
//     value the history allows: the value of an acknowledged write no
//     later acknowledged write follows (the one invoked after it returned),
//     or of any write whose outcome is unknown (it may apply at any time
//     after its invoke). A key that reads otherwise lost a write, or holds
//     a value never written.
//   - Linearizability (CheckLinearizable): porcupine checks the history
//     per key against a register model (get, put, delete); unknown writes
//     return after every other operation, so the checker may place them
//     anywhere after their invoke, or nowhere. porcupine's Unknown (the
//     check timed out) is a failure, not a pass. For the first offending
//     key, porcupine's HTML visualisation is written to a file.
//   - The cluster's own invariants, replicas equal: Options.ClusterCheck,
//     which cellctl drill fills with cellctl check's code.
//
// # The report
//
// Summarize turns the history and the schedule into a Report: operations
// and errors per second before, during, between and after the faults; per
// fault and per region the unavailability window (the longest gap between
// successful operations on the region's keys that overlaps the fault, up
// to the next fault or the end of the load), with p50/p99/max over the
// faults; p50/p99 latency of successful operations; the lost writes and the
// linearizability verdict. Report.OK says whether the drill passed.
package drill
