package wal

import (
	"sync/atomic"
	"time"
)

// Metrics are counters since Open, read with DB.Metrics. Writes/Commits is
// the mean group-commit size; Commits/WALSyncs should stay near 1.
type Metrics struct {
	// Writes is the number of acknowledged writes (StoreLog(s), DeleteRange,
	// Set, SetUint64, DropRegion calls that returned nil and wrote).
	Writes uint64
	// Commits is the number of synced pebble commits that carried them: one
	// per group of concurrent writes.
	Commits uint64
	// BytesCommitted is the size of those commits' batches.
	BytesCommitted uint64
	// CommitTime is the total time spent in those commits (WAL write and
	// fsync included); CommitTime/Commits is the mean commit latency.
	CommitTime time.Duration
	// WALSyncs is the number of fsyncs of pebble WAL files, counted at the
	// vfs layer, and WALSyncTime their total duration.
	WALSyncs    uint64
	WALSyncTime time.Duration
	// Flushes counts pebble's memtable flushes that ended without error,
	// FlushTime their time and FlushBytes the sstable bytes they wrote.
	Flushes    uint64
	FlushTime  time.Duration
	FlushBytes uint64
	// Compactions counts pebble's compactions that ended without error,
	// CompactionTime their time, and CompactionBytesRead and
	// CompactionBytesWritten the sstable bytes they read and wrote. They
	// run in the background, on the server's CPUs and disk: a log
	// truncated after a snapshot leaves a range deletion that they apply.
	Compactions            uint64
	CompactionTime         time.Duration
	CompactionBytesRead    uint64
	CompactionBytesWritten uint64
	// Excises counts the log truncations done by pebble's Excise (a
	// prefix of a region's log, or all of it; LogStore.DeleteRange) and
	// ExciseTime their time. They are acknowledged writes, not commits.
	Excises    uint64
	ExciseTime time.Duration
}

// metricsCounters are the live counters behind Metrics.
type metricsCounters struct {
	writes, commits, bytes, commitNanos, syncs, syncNanos atomic.Uint64

	flushes, flushNanos, flushBytes                      atomic.Uint64
	compactions, compactNanos, compactRead, compactWrite atomic.Uint64
	excises, exciseNanos                                 atomic.Uint64
}

func (m *metricsCounters) recordExcise(writes int, d time.Duration) {
	m.writes.Add(uint64(writes))
	m.excises.Add(1)
	m.exciseNanos.Add(uint64(d))
}

func (m *metricsCounters) recordFlush(d time.Duration, bytes uint64) {
	m.flushes.Add(1)
	m.flushNanos.Add(uint64(d))
	m.flushBytes.Add(bytes)
}

func (m *metricsCounters) recordCompaction(d time.Duration, read, written uint64) {
	m.compactions.Add(1)
	m.compactNanos.Add(uint64(d))
	m.compactRead.Add(read)
	m.compactWrite.Add(written)
}

func (m *metricsCounters) recordSync(d time.Duration) {
	m.syncs.Add(1)
	m.syncNanos.Add(uint64(d))
}

func (m *metricsCounters) recordCommit(writes int, bytes int, d time.Duration) {
	m.writes.Add(uint64(writes))
	m.commits.Add(1)
	m.bytes.Add(uint64(bytes))
	m.commitNanos.Add(uint64(d))
}

func (m *metricsCounters) snapshot() Metrics {
	return Metrics{
		Writes:         m.writes.Load(),
		Commits:        m.commits.Load(),
		BytesCommitted: m.bytes.Load(),
		CommitTime:     time.Duration(m.commitNanos.Load()),
		WALSyncs:       m.syncs.Load(),
		WALSyncTime:    time.Duration(m.syncNanos.Load()),

		Flushes:    m.flushes.Load(),
		FlushTime:  time.Duration(m.flushNanos.Load()),
		FlushBytes: m.flushBytes.Load(),

		Compactions:            m.compactions.Load(),
		CompactionTime:         time.Duration(m.compactNanos.Load()),
		CompactionBytesRead:    m.compactRead.Load(),
		CompactionBytesWritten: m.compactWrite.Load(),

		Excises:    m.excises.Load(),
		ExciseTime: time.Duration(m.exciseNanos.Load()),
	}
}
