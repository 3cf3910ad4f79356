package wal

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// This file holds the three places where the DB listens to pebble for
// failures (see doc.go, "What pebble does on a WAL error"):
//
//   - walFS wraps the FS pebble writes its WAL to, counts WAL syncs for
//     Metrics, and latches the first failed write or sync of a WAL file the
//     moment the OS reports it, before pebble hands the error to anyone.
//   - pebbleLogger turns pebble's Fatalf (whose default is os.Exit(1), and
//     which is how pebble reports a failed WAL sync from DB.Apply) into a
//     latched error.
//   - eventListener logs pebble's background errors (failed flushes and
//     compactions, which pebble retries itself), slow disks and data
//     corruption found by reads.

// walFS wraps an FS so that files whose name ends in ".log" (pebble's WAL
// segments, created, reused or reopened) report their write and sync errors
// to the DB's latch and their syncs to its metrics.
type walFS struct {
	vfs.FS
	db *DB
}

func (fs *walFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &walFile{File: f, db: fs.db, name: name}, nil
}

func (fs *walFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return fs.wrap(name, f, err)
}

func (fs *walFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.wrap(newname, f, err)
}

func (fs *walFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	return fs.wrap(name, f, err)
}

// Unwrap returns the wrapped FS.
func (fs *walFS) Unwrap() vfs.FS { return fs.FS }

// walFile is one WAL segment file. Every method that can lose data latches
// its error.
type walFile struct {
	vfs.File
	db   *DB
	name string
}

func (f *walFile) failed(op string, err error) error {
	if err != nil {
		f.db.fail(fmt.Errorf("pebble WAL %s %s: %w", op, f.name, err))
	}
	return err
}

func (f *walFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.failed("write", err)
}

func (f *walFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.failed("write", err)
}

func (f *walFile) Preallocate(off, length int64) error {
	return f.failed("preallocate", f.File.Preallocate(off, length))
}

func (f *walFile) Sync() error {
	start := time.Now()
	err := f.File.Sync()
	f.db.metrics.recordSync(time.Since(start))
	return f.failed("sync", err)
}

func (f *walFile) SyncData() error {
	start := time.Now()
	err := f.File.SyncData()
	f.db.metrics.recordSync(time.Since(start))
	return f.failed("sync", err)
}

func (f *walFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.failed("sync", err)
}

// pebbleLogger sends pebble's log lines to the DB's slog.Logger. Fatalf
// latches instead of exiting: pebble calls it for a failed commit (a failed
// WAL write or sync, after which DB.Apply returns nil!), a failed MANIFEST
// write, and broken invariants. Pebble goes on after Fatalf returns; the DB
// refuses every later write, and readers see what pebble has in memory.
type pebbleLogger struct{ db *DB }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.db.log.Info("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.db.log.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.db.log.Error("pebble fatal error (latched, process kept alive)", "msg", msg)
	// Keep the original error (errors.Is(err, errorfs.ErrInjected), say).
	for _, a := range args {
		if err, ok := a.(error); ok {
			l.db.fail(fmt.Errorf("pebble: %s: %w", msg, err))
			return
		}
	}
	l.db.fail(errors.New("pebble: " + msg))
}

// eventListener returns the pebble events the DB logs.
func (db *DB) eventListener() *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			db.log.Warn("pebble background error (pebble retries flushes; reads and writes go on)", "err", err)
		},
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			// The read that found it returns an error of its own; pebble's
			// default here is Fatalf.
			db.log.Error("pebble data corruption", "info", info.String())
		},
		DiskSlow: func(info pebble.DiskSlowInfo) {
			db.log.Warn("pebble disk slow", "info", info.String())
		},
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err != nil || info.Ingest {
				return
			}
			db.metrics.recordFlush(info.TotalDuration, tablesSize(info.Output))
			db.log.Debug("pebble flush", "info", info.String())
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			if info.Err != nil {
				return
			}
			var read uint64
			for _, in := range info.Input {
				read += tablesSize(in.Tables)
			}
			written := tablesSize(info.Output.Tables)
			db.metrics.recordCompaction(info.TotalDuration, read, written)
			// Slow ones where an operator looks; all of them at debug.
			if info.TotalDuration >= slowCompaction {
				db.log.Info("pebble compaction", "took", info.TotalDuration, "info", info.String())
			} else {
				db.log.Debug("pebble compaction", "info", info.String())
			}
		},
	}
}

// slowCompaction is how long a compaction runs before the log names it at
// info level.
const slowCompaction = time.Second

// tablesSize sums the sizes of sstables.
func tablesSize(ts []pebble.TableInfo) uint64 {
	var n uint64
	for _, t := range ts {
		n += t.Size
	}
	return n
}
