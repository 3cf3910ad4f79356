// Package wal is Cell's durable raft storage: the logs and stable state of
// every region of a server in one shared pebble instance (so that the
// fsyncs of all raft groups group-commit), and their snapshots in plain
// files. It implements hashicorp/raft's LogStore (and the optional
// MonotonicLogStore and CommitTrackingLogStore), StableStore and
// SnapshotStore, and knows nothing of the tree or the server (docs/design.md §9).
//
//	db, _ := wal.Open(wal.Options{Dir: dir + "/raft"})
//	snaps, _ := wal.OpenSnapshots(wal.SnapshotOptions{Dir: dir + "/snapshots"})
//	r, _ := raft.NewRaft(conf, fsm, db.Log(region), db.Stable(region), snaps.Region(region), trans)
//
// # Keys
//
// A key is a one-byte kind, the region ID as 4 bytes big-endian, and a
// suffix: the index as 8 bytes big-endian for a log entry, raft's key bytes
// for a stable value, nothing for the region's commit index (format.go
// draws it). Every read of a region is a point Get of one of its keys or an
// iterator whose LowerBound and UpperBound are the region's key range, so
// no region ever sees another's keys. DB.Regions lists the regions that
// have keys; DB.DropRegion deletes all of a region's keys (two range
// deletions and a delete) in one synced batch.
//
// # Record format
//
// A log entry is stored in Cell's own fixed little-endian record: a 40-byte
// header (version, type, data length, index, term, appendedAt in unix
// nanoseconds, extensions length) followed by the data and the extensions.
// format.go draws it, testdata/log.golden pins it byte by byte, and the
// decoder checks every length against the buffer (fuzzed: it never panics,
// and re-encodes whatever it accepts byte for byte). Stable values are
// raft's bytes as given, and SetUint64 values 8 bytes little-endian.
//
// # The log invariant
//
// A region's log is the contiguous run [FirstIndex, LastIndex]: StoreLogs
// appends or truncates-and-appends (a conflicting suffix, or, after a gap,
// the whole old log), DeleteRange removes a prefix or a suffix (a hole in
// the middle is refused). So the store is a raft.MonotonicLogStore, and
// raft deletes the whole log after installing a snapshot. LogStore.Check
// verifies the invariant against pebble.
//
// # Raft's optional interfaces (hashicorp/raft v1.8.0)
//
//   - MonotonicLogStore (IsMonotonic true): correct because of the
//     invariant above; raft then resets the log after a snapshot install or
//     user restore (one Excise here) instead of leaving a gap.
//   - CommitTrackingLogStore: StageCommitIndex keeps the index in memory and
//     the next StoreLogs writes it in the same batch; GetCommitIndex returns
//     the last durable one, capped at LastIndex. Raft uses it only with
//     Config.RestoreCommittedLogs. Beware: in v1.8.0 that option breaks a
//     node whose membership configuration is only in the replayed part of
//     the log (not in a snapshot): NewRaft's configuration scan starts after
//     the replayed index, the node comes back with no peers ("no known
//     peers, aborting election") and never elects itself. Replayed entries
//     reach the FSM only after NewRaft returns.
//   - StableStore "not found": raft compares err.Error() with "not found"
//     (NewRaft, HasExistingState, requestVote), so Get and GetUint64 of a
//     missing key return ErrNotFound, whose text is exactly that, unwrapped.
//     Any other error there fails NewRaft, or makes every vote request a
//     silent no-op.
//   - SnapshotSink.Close is called twice on success (the FSM's Persist
//     closes the sink, then raft's takeSnapshot closes it again), and a
//     snapshot reader is closed twice when FSM.Restore fails: both are
//     no-ops the second time.
//
// # Durability and the sync latch
//
// StoreLog, StoreLogs, DeleteRange of a suffix (one pebble range
// deletion), Set, SetUint64 and DropRegion each commit one pebble batch
// with pebble.Sync before they return nil: a nil return means the write
// survives a crash. Concurrent writes of different regions share fsyncs
// (commit.go): while one synced commit is in flight the next writers
// queue, and the first of them commits the whole queue as one batch with
// one fsync.
//
// DeleteRange of a prefix (raft's truncation behind a snapshot) or of the
// whole log is pebble's Excise instead, which pebble makes durable before
// it returns (a synced MANIFEST edit, or, when the range still overlaps a
// memtable, a flushable ingest recorded in a synced WAL). Old entries sit
// in the lower levels by then; a range deletion over them would make the
// compactions read them back (seconds of a server's CPU after a log of a
// gigabyte), while Excise drops the files inside the range and cuts the
// others into virtual sstables. It takes its turn in the commit queue,
// alone, so there is still one pebble write at a time.
//
// The first failure of a commit, a WAL write or a WAL fsync latches: the
// failing call returns an error, and so does every later write of every
// region, at once, without touching pebble. The error wraps ErrSyncFailed
// and the original error (errors.Is works for both), and DB.Err returns it.
// The latch is never cleared: after a failed fsync the kernel may have
// dropped the dirty pages and report the next fsync as a success, so only
// reopening (after a process restart) knows what is durable. The server
// should stop all raft groups and restart when DB.Err is non-nil.
//
// After the latch, reads go on and show the acknowledged state, with one
// exception: a log entry or stable value written by the failed call is
// never shown (the LogStore serves reads within its acknowledged bounds,
// the StableStore from a copy of its acknowledged values), but what a
// failed DeleteRange, truncating StoreLogs or DropRegion was removing is
// hidden as soon as the call starts, and stays hidden. Reading back raft state that
// was never durable would be unsafe (a vote granted again from a Set that
// failed); hiding entries raft was deleting anyway is not.
//
// # What pebble does on a WAL error
//
// Found by reading pebble v2.1.7 (commit.go, db.go, record/log_writer.go)
// and by experiment with errorfs:
//
//   - The commit pipeline applies a batch to the memtable and publishes it
//     (visible to reads) before the WAL fsync completes; the fsync's error
//     reaches the batch afterwards.
//   - DB.Apply then calls Options.Logger.Fatalf("pebble: fatal commit
//     error: ..."), whose default is os.Exit(1): pebble kills the process.
//     With a Logger whose Fatalf returns, Apply returns nil: a failed sync
//     reported as a success.
//   - The WAL LogWriter latches the error. A later commit that finds it
//     panics (commitWrite: "panic(err)") while holding the commit
//     pipeline's mutex, after which every concurrent and later commit, and
//     DB.Close, block forever.
//   - Failed flushes and compactions go to EventListener.BackgroundError and
//     are retried; a failed MANIFEST write or sync is another Fatalf.
//
// So this package (pebble.go): gives pebble a Logger whose Fatalf latches
// instead of exiting; wraps the FS so that a failed write or sync of a WAL
// file latches the moment the OS reports it; checks the latch after every
// Apply (a nil from Apply is not trusted if the latch is set); runs one
// Apply at a time and none after the latch (so the panicking path is never
// reached); recovers a panic from Apply anyway, and then skips pebble's
// Close, which could block.
//
// # Snapshots
//
// A SnapshotStore (one per region, from Snapshots.Region) writes each
// snapshot into Dir/<region as %08x>/<id>.tmp/: a data file streamed in
// checksummed chunks (ChunkSize each, so a 1 GiB region image never sits in
// memory; every BytesPerSync bytes its dirty pages are handed to the disk
// without waiting, so that Close's sync, and the log's syncs queued behind
// it, do not wait for the whole image) ending in a trailer with the
// stream's length and CRC, and a meta
// file (raft.SnapshotMeta with its Configuration, plus chunk size and
// stream CRC) behind its own checksum (snapformat.go draws both). Close
// syncs both files and the directory, renames it to Dir/<region>/<id>,
// syncs the parents, and prunes the region to the newest Retain snapshots.
// Cancel removes the temporary directory; OpenSnapshots removes those a
// crash left. List returns newest first (term, index, id) and leaves out any
// snapshot whose meta is missing or fails its checksum, or whose data file
// has the wrong size; Open checks the data file's header and trailer; its
// reader checks every chunk before handing out its bytes and the whole
// stream before io.EOF, returning errors that wrap ErrCorruption. (raft
// falls back to the next snapshot when a restore fails, so FSM.Restore must
// cope with a stream that errors part way.)
//
// # Concurrency and locking
//
// DB, LogStore, StableStore, Snapshots and SnapshotStore are safe for
// concurrent use; a SnapshotSink and a snapshot reader belong to one
// goroutine. Writes of one region are serialised (LogStore.mu,
// StableStore.wmu are held across the synced commit), so raft's main loop
// and its snapshot goroutine (which deletes a log prefix) take turns;
// writes of different regions overlap and group-commit. Reads take no
// region lock: GetLog checks the index against the published bounds, then
// takes one of the region's newest entries from memory if it was stored at
// the log's current generation (recent.go), else reads pebble, and calls
// a missing entry corruption only if no deletion
// or overwrite ran in between (LogStore.gen, bumped before and after each,
// tells it). Lock order: DB.life (read) < LogStore.mu < StableStore.wmu
// < StableStore.mu < the commit queue's mutex. Close waits for operations
// in flight; anything after it returns ErrClosed. DropRegion (both DB's and
// Snapshots') requires the region's raft group to be shut down.
package wal
