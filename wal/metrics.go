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
}

// metricsCounters are the live counters behind Metrics.
type metricsCounters struct {
	writes, commits, bytes, commitNanos, syncs, syncNanos atomic.Uint64
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
	}
}
