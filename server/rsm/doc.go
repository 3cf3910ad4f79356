// Package rsm is a region's replicated state machine: the deterministic
// apply path every replica of a region runs, in log order, to turn the
// records of its raft group into the region's memory.
//
// It holds:
//
//   - the record format (record.go): the write records a region's log
//     carries (put, delete, child, the steps of a meganode split on its
//     source and its target, the region record, root records), their
//     bodies, and ErrBadRecord; testdata/records.golden pins the bytes;
//   - the replicated State beside the region's image (state.go): the
//     applied index, the splits in progress, an unpublished root, and
//     the session table (sessions.go) with its filter of forgotten
//     clients (evicted.go), all carried by snapshots;
//   - the Machine (machine.go): one region's file of meganodes, its
//     meganode table (meganodes.go), the State, and Apply (apply.go,
//     split.go, target.go), Snapshot and Restore (snapshot.go).
//
// It imports blink and meganode only. The raft group, the server's
// options and data directory, the network and the clock are outside:
// the server adapts raft to a Machine (server/fsm.go), tells it where
// region files live (Files), and hears of each record applied
// (Config.OnApply) for its metrics.
//
// # Determinism
//
// Apply's outcome depends only on the region's contents, the State and
// the record (blink's node and extent allocation are deterministic, and
// so is the slot a new meganode takes): never on the time, a connection,
// a worker or a server's flags. The sizes that decide a write's outcome
// come from the region record, the log's first, never from options. So
// every replica of a region, and every replay of its log, ends with a
// byte-identical image at each applied index, and every error Apply
// returns is part of a record's outcome, the same on every replica.
//
// # Concurrency
//
// Apply, Restore and the readers that need one applied index (Capture,
// Snapshot's start, Exclusive, State) serialise on the Machine's lock.
// Searches never take it: blink's readers are lock-free and validate
// what they read by node versions, and the meganode table (MeganodeAt,
// Meganodes) is an immutable snapshot swapped atomically.
//
// Locking notes: Machine.mu < Machine.megaMu < meganode.Region.mu <
// meganode.Extents.mu < a blink tree's writer lock.
package rsm
