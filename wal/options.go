package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options configure Open. The zero value of every field but Dir means its
// default.
type Options struct {
	// FS is the filesystem pebble lives on. Default vfs.Default (the OS);
	// tests pass vfs.NewCrashableMem() or an errorfs wrapper.
	FS vfs.FS
	// Dir is the pebble directory, created if missing. Required.
	Dir string
	// Logger receives the package's and pebble's log lines. Default
	// slog.Default().
	Logger *slog.Logger
	// OnFail, when set, is called once, on a goroutine of its own, when
	// the first write or sync fails and the store latches (DB.Err). A
	// server stops its raft groups there: hashicorp/raft panics when it
	// cannot persist a vote or a term, which a group that lost its log
	// would try at its next election.
	OnFail func(error)
	// CacheSize is pebble's block cache in bytes. Default 8 MiB: raft reads
	// its log back only to replicate to a slow follower.
	CacheSize int64
	// MemTableSize is pebble's memtable size in bytes. Default 16 MiB
	// (pebble's own default is 4 MiB); a raft batch larger than half of it
	// is committed as a flushable batch, which forces a memtable flush.
	MemTableSize uint64
}

// Default values of Options.
const (
	DefaultCacheSize    = 8 << 20
	DefaultMemTableSize = 16 << 20
)

// EnsureDefaults fills in the default of every zero field but Dir and
// returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = DefaultMemTableSize
	}
	return o
}

// Validate reports what is wrong with o (after EnsureDefaults).
func (o *Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("wal: Options.Dir is required"))
	}
	if o.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("wal: Options.CacheSize %d is negative", o.CacheSize))
	}
	if o.MemTableSize != 0 && o.MemTableSize < 1<<20 {
		errs = append(errs, fmt.Errorf("wal: Options.MemTableSize %d is below 1 MiB", o.MemTableSize))
	}
	return errors.Join(errs...)
}

// SnapshotOptions configure OpenSnapshots. The zero value of every field but
// Dir means its default.
type SnapshotOptions struct {
	// FS is the filesystem snapshots live on. Default vfs.Default.
	FS vfs.FS
	// Dir holds one directory per region (Dir/<region as %08x>/), created if
	// missing. Required. It must not be the pebble directory.
	Dir string
	// Retain is how many complete snapshots of each region are kept; a
	// successful SnapshotSink.Close deletes older ones. Default 2.
	Retain int
	// ChunkSize is the payload size of each checksummed chunk of a snapshot's
	// data file, and so the sink's and reader's buffer size. Default 1 MiB,
	// at most MaxChunkSize. A snapshot records its own chunk size, so this
	// may change between runs.
	ChunkSize int
	// BytesPerSync: while a snapshot's data file is written, every this
	// many bytes the file's dirty pages are handed to the disk
	// (sync_file_range, which does not wait), so that the fsync at Close
	// finds little left to write and the log's syncs, sharing the disk,
	// are not queued behind the whole image. Default 1 MiB; negative
	// turns it off. It makes nothing durable earlier: Close still syncs.
	BytesPerSync int
	// Logger receives the package's log lines. Default slog.Default().
	Logger *slog.Logger
	// TestingKnobs are for tests only.
	TestingKnobs SnapshotTestingKnobs
}

// SnapshotTestingKnobs are hooks for tests.
type SnapshotTestingKnobs struct {
	// Now, when set, replaces time.Now for the timestamp part of snapshot
	// IDs (golden files need fixed IDs). IDs stay unique: a timestamp not
	// above the previous one is bumped by a nanosecond.
	Now func() time.Time
}

// Default values and limits of SnapshotOptions.
const (
	DefaultRetain       = 2
	DefaultChunkSize    = 1 << 20
	MaxChunkSize        = 64 << 20
	DefaultBytesPerSync = 1 << 20
)

// EnsureDefaults fills in the default of every zero field but Dir and
// returns o.
func (o *SnapshotOptions) EnsureDefaults() *SnapshotOptions {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Retain == 0 {
		o.Retain = DefaultRetain
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.BytesPerSync == 0 {
		o.BytesPerSync = DefaultBytesPerSync
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.TestingKnobs.Now == nil {
		o.TestingKnobs.Now = time.Now
	}
	return o
}

// Validate reports what is wrong with o (after EnsureDefaults).
func (o *SnapshotOptions) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("wal: SnapshotOptions.Dir is required"))
	}
	if o.Retain < 1 {
		errs = append(errs, fmt.Errorf("wal: SnapshotOptions.Retain %d must be at least 1", o.Retain))
	}
	if o.ChunkSize < 1 || o.ChunkSize > MaxChunkSize {
		errs = append(errs, fmt.Errorf("wal: SnapshotOptions.ChunkSize %d must be in [1, %d]", o.ChunkSize, MaxChunkSize))
	}
	return errors.Join(errs...)
}
