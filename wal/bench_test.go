package wal

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// BenchmarkStoreLogs appends one 256-byte entry per StoreLogs call from 1,
// 4 or 16 regions at once (one goroutine each, as one raft group each) to
// a DB on disk (b.TempDir). With group commit, stores/s grows with the
// number of regions while fsyncs/s stays about flat; stores/fsync is the
// mean group size.
func BenchmarkStoreLogs(b *testing.B) {
	benchAppends(b, func(db *DB, region uint32, l *raft.Log) error {
		return db.Log(region).StoreLogs([]*raft.Log{l})
	})
}

// BenchmarkPebbleSyncedApply is the same load committed straight through
// pebble's own commit pipeline (concurrent synced Applies, which pebble
// groups itself), without this package's commit queue: the baseline the
// queue must keep up with. Not safe under sync failure (see commit.go).
func BenchmarkPebbleSyncedApply(b *testing.B) {
	benchAppends(b, func(db *DB, region uint32, l *raft.Log) error {
		batch := db.pdb.NewBatch()
		defer batch.Close()
		rec, _ := appendLog(nil, l)
		_ = batch.Set(logKey(region, l.Index), rec, nil)
		return db.pdb.Apply(batch, pebble.Sync)
	})
}

// benchAppends runs b.N appends of one 256-byte entry, spread over 1, 4 or
// 16 regions appending at once (one goroutine each), through store, and
// reports stores/s, fsyncs/s and stores per fsync (the mean group commit).
func benchAppends(b *testing.B, store func(db *DB, region uint32, l *raft.Log) error) {
	for _, regions := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("regions=%d", regions), func(b *testing.B) {
			db, err := Open(Options{Dir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			data := make([]byte, 256)
			before := db.Metrics()
			b.ReportAllocs()
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for r := 1; r <= regions; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := &raft.Log{Term: 1, Type: raft.LogCommand, Data: data}
					for next.Add(1) <= int64(b.N) {
						l.Index++
						l.AppendedAt = time.Now()
						if err := store(db, uint32(r), l); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			m := db.Metrics()
			syncs := m.WALSyncs - before.WALSyncs
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/secs, "stores/s")
			b.ReportMetric(float64(syncs)/secs, "fsyncs/s")
			b.ReportMetric(float64(b.N)/float64(max(syncs, 1)), "stores/fsync")
		})
	}
}

// BenchmarkGetLogSequential reads a 100,000-entry log (200-byte entries)
// in index order after reopening the store, as raft does after a restart
// (NewRaft's scan for configuration entries, then the replay of committed
// entries) and as a leader does to catch a follower up: GetLog (entries
// read ahead, readahead.go) side by side with one pebble Get per entry
// (getPoint, GetLog's read without read-ahead). ns/op is per entry.
func BenchmarkGetLogSequential(b *testing.B) {
	const entries = 100_000
	dir := b.TempDir()
	opts := Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	db, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 200)
	batch := make([]*raft.Log, 0, 64)
	for i := uint64(1); i <= entries; i++ {
		batch = append(batch, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data})
		if len(batch) == cap(batch) || i == entries {
			if err := db.Log(1).StoreLogs(batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	if db, err = Open(opts); err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ls := db.Log(1)
	bnd, err := ls.bounds()
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		get  func(uint64, *raft.Log) error
	}{
		{"readahead", ls.GetLog},
		{"point", func(i uint64, l *raft.Log) error { return ls.getPoint(i, l, bnd, ls.gen.Load()) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var l raft.Log
			for i := 0; i < b.N; i++ {
				if err := bc.get(uint64(i%entries)+1, &l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGetLogTail is raft's read of an entry it just stored (a
// leader's replication goroutine sending it, a follower applying it):
// three regions share a store whose older entries were flushed to
// sstables, and each round appends one 200-byte entry to region 2 and
// reads it back (only the read is timed). "recent" is GetLog (the entry
// from memory, recent.go), "pebble" the read without it (read-ahead, then
// a point read), as GetLog read before.
func BenchmarkGetLogTail(b *testing.B) {
	const preload = 20_000
	db, err := Open(Options{Dir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	data := make([]byte, 200)
	for r := uint32(1); r <= 3; r++ {
		batch := make([]*raft.Log, 0, 256)
		for i := uint64(1); i <= preload; i++ {
			batch = append(batch, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data})
			if len(batch) == cap(batch) || i == preload {
				if err := db.Log(r).StoreLogs(batch); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
	}
	if err := db.pdb.Flush(); err != nil {
		b.Fatal(err)
	}
	ls := db.Log(2)
	for _, off := range []bool{false, true} {
		b.Run(map[bool]string{false: "recent", true: "pebble"}[off], func(b *testing.B) {
			ls.recentOff = off
			defer func() { ls.recentOff = false }()
			next, err := ls.LastIndex()
			if err != nil {
				b.Fatal(err)
			}
			var l raft.Log
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				next++
				if err := ls.StoreLogs([]*raft.Log{{Index: next, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := ls.GetLog(next, &l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTruncateLongLog is what a log that grew long between two
// snapshots costs when raft truncates it behind the next one, with Excise
// (excise) and with the range deletion it replaced (rangedel), side by
// side. Region 1 appends 500,000 entries of 1 KiB (500 MiB, in batches of
// 64), interleaved with region 2's appends so that every flushed file
// holds both regions and their commit-index keys, as on a server with
// several groups; then, with no pause, region 1's first 490,000 entries
// are deleted and region 2 appends 40,000 more in batches of 16, as a
// busy group goes on. Reported: the truncation's own time (trunc-ms),
// region 2's appends per second and their p99 after it, the compaction
// pebble did from the truncation until it was quiet (compact-s,
// compact-MiB-read), and the disk space pebble holds then (disk-MiB:
// a virtual sstable keeps its whole backing file). Run with -benchtime
// 1x: the load is the benchmark.
func BenchmarkTruncateLongLog(b *testing.B) {
	const (
		entries   = 500_000
		keep      = 10_000
		entrySize = 1 << 10
		after     = 40_000
	)
	for _, mode := range []string{"excise", "rangedel"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				db, err := Open(Options{Dir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					b.Fatal(err)
				}
				db.truncateByRangeDeletion = mode == "rangedel"
				data := make([]byte, entrySize)
				mk := func(i uint64) *raft.Log {
					return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: entryTime}
				}
				long, busy := db.Log(1), db.Log(2)
				var busyNext uint64 = 1
				for lo := uint64(1); lo <= entries; lo += 64 {
					batch := make([]*raft.Log, 0, 64)
					for i := lo; i < lo+64 && i <= entries; i++ {
						batch = append(batch, mk(i))
					}
					_ = long.StageCommitIndex(lo - 1) // as raft does: the commit key in every batch
					if err := long.StoreLogs(batch); err != nil {
						b.Fatal(err)
					}
					if (lo/64)%8 == 0 {
						_ = busy.StageCommitIndex(busyNext - 1)
						if err := busy.StoreLogs([]*raft.Log{mk(busyNext)}); err != nil {
							b.Fatal(err)
						}
						busyNext++
					}
				}
				before := db.Metrics() // no pause: the load goes on into the truncation
				b.StartTimer()

				start := time.Now()
				if err := long.DeleteRange(1, entries-keep); err != nil {
					b.Fatal(err)
				}
				trunc := time.Since(start)
				lat := make([]time.Duration, 0, after/16)
				appendStart := time.Now()
				for n := 0; n < after; n += 16 {
					batch := make([]*raft.Log, 16)
					for i := range batch {
						batch[i] = mk(busyNext)
						busyNext++
					}
					_ = busy.StageCommitIndex(batch[0].Index - 1)
					t0 := time.Now()
					if err := busy.StoreLogs(batch); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
				appendTime := time.Since(appendStart)
				waitQuiet(b, db)
				b.StopTimer()
				m := db.Metrics()
				slices.Sort(lat)
				b.ReportMetric(float64(trunc.Microseconds())/1e3, "trunc-ms")
				b.ReportMetric(after/appendTime.Seconds(), "appends/s")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1e3, "p99-ms")
				b.ReportMetric((m.CompactionTime - before.CompactionTime).Seconds(), "compact-s")
				b.ReportMetric(float64(m.CompactionBytesRead-before.CompactionBytesRead)/(1<<20), "compact-MiB-read")
				b.ReportMetric(float64(db.pdb.Metrics().DiskSpaceUsage())/(1<<20), "disk-MiB")
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// waitQuiet waits (up to a minute) until pebble has had no compaction
// running, and finished none, for a second.
func waitQuiet(b *testing.B, db *DB) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	last, since := db.Metrics().Compactions, time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n := db.Metrics().Compactions
		if n != last || db.pdb.Metrics().Compact.NumInProgress > 0 {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) >= time.Second {
			return
		}
	}
	b.Fatal("pebble still compacting after a minute")
}
