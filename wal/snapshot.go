package wal

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// Snapshots holds the raft snapshots of all regions of a server, one
// directory per region under SnapshotOptions.Dir. It is safe for concurrent
// use; regions never share a file.
type Snapshots struct {
	opts SnapshotOptions
	fs   vfs.FS
	log  *slog.Logger

	lastStamp atomic.Int64 // the last timestamp given to a snapshot ID

	mu struct {
		sync.Mutex
		regions map[uint32]*SnapshotStore
	}
}

// OpenSnapshots creates opts.Dir if needed and removes the temporary
// directories that a crash left in the middle of writing a snapshot.
func OpenSnapshots(opts SnapshotOptions) (*Snapshots, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Snapshots{opts: opts, fs: opts.FS, log: opts.Logger.With("component", "wal-snapshots")}
	s.mu.regions = make(map[uint32]*SnapshotStore)
	if err := s.fs.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("wal: create snapshot dir: %w", err)
	}
	if err := syncDir(s.fs, s.fs.PathDir(opts.Dir)); err != nil {
		return nil, err
	}
	names, err := s.fs.List(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("wal: list snapshot dir: %w", err)
	}
	for _, name := range names {
		if _, ok := parseRegionDir(name); !ok {
			continue
		}
		dir := s.fs.PathJoin(opts.Dir, name)
		entries, err := s.fs.List(dir)
		if err != nil {
			return nil, fmt.Errorf("wal: list %s: %w", dir, err)
		}
		removed := false
		for _, e := range entries {
			if strings.HasSuffix(e, snapTmpExt) {
				s.log.Info("removing a snapshot left half-written by a crash", "path", s.fs.PathJoin(dir, e))
				if err := s.fs.RemoveAll(s.fs.PathJoin(dir, e)); err != nil {
					return nil, fmt.Errorf("wal: remove %s: %w", e, err)
				}
				removed = true
			}
		}
		if removed {
			if err := syncDir(s.fs, dir); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// regionDirName is the directory name of a region.
func regionDirName(region uint32) string { return fmt.Sprintf("%08x", region) }

func parseRegionDir(name string) (uint32, bool) {
	if len(name) != 8 {
		return 0, false
	}
	v, err := strconv.ParseUint(name, 16, 32)
	return uint32(v), err == nil
}

// Region returns region's snapshot store; every call for one region
// returns the same *SnapshotStore.
func (s *Snapshots) Region(region uint32) *SnapshotStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.mu.regions[region]
	if !ok {
		st = &SnapshotStore{s: s, region: region, dir: s.fs.PathJoin(s.opts.Dir, regionDirName(region))}
		s.mu.regions[region] = st
	}
	return st
}

// DropRegion deletes all of region's snapshots (complete or not) and syncs
// the deletion. The caller must have shut the region's raft group down.
func (s *Snapshots) DropRegion(region uint32) error {
	st := s.Region(region)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := s.fs.RemoveAll(st.dir); err != nil {
		return fmt.Errorf("wal: region %d: drop snapshots: %w", region, err)
	}
	return syncDir(s.fs, s.opts.Dir)
}

// nextStamp returns a timestamp above every one given before.
func (s *Snapshots) nextStamp() int64 {
	now := s.opts.TestingKnobs.Now().UnixNano()
	for {
		last := s.lastStamp.Load()
		next := max(now, last+1)
		if s.lastStamp.CompareAndSwap(last, next) {
			return next
		}
	}
}

// SnapshotStore is one region's raft.SnapshotStore. Get it with
// Snapshots.Region. Safe for concurrent use: several sinks may be open at
// once, and List and Open never see a snapshot before its sink's Close has
// made it durable.
type SnapshotStore struct {
	s      *Snapshots
	region uint32
	dir    string

	// mu serialises pruning and DropRegion.
	mu sync.Mutex
}

var _ raft.SnapshotStore = (*SnapshotStore)(nil)

// Region returns the region ID of the store.
func (st *SnapshotStore) Region() uint32 { return st.region }

// Create starts a snapshot; see sink for the contract of the returned
// SnapshotSink. Only snapshot version 1 exists (as in raft's own stores).
func (st *SnapshotStore) Create(version raft.SnapshotVersion, index, term uint64,
	configuration raft.Configuration, configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	if version != 1 {
		return nil, fmt.Errorf("wal: region %d: unsupported snapshot version %d", st.region, version)
	}
	id := fmt.Sprintf("%d-%d-%d", term, index, st.s.nextStamp())
	fs := st.s.fs
	tmp := fs.PathJoin(st.dir, id+snapTmpExt)
	if err := fs.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("wal: region %d: create snapshot dir: %w", st.region, err)
	}
	f, err := fs.Create(fs.PathJoin(tmp, snapDataName), vfs.WriteCategoryUnspecified)
	if err != nil {
		_ = fs.RemoveAll(tmp)
		return nil, fmt.Errorf("wal: region %d: create snapshot data: %w", st.region, err)
	}
	if bps := st.s.opts.BytesPerSync; bps > 0 {
		// The sink syncs before a successful Close; an abandoned file
		// needs no sync (NoSyncOnClose) before it is removed.
		f = vfs.NewSyncingFile(f, vfs.SyncingFileOptions{BytesPerSync: bps, NoSyncOnClose: true})
	}
	cs := st.s.opts.ChunkSize
	k := &sink{
		st:  st,
		tmp: tmp,
		f:   f,
		buf: make([]byte, chunkHeaderLen, chunkHeaderLen+cs),
		meta: snapMetaFile{
			SnapshotMeta: raft.SnapshotMeta{
				Version:            version,
				ID:                 id,
				Index:              index,
				Term:               term,
				Configuration:      configuration.Clone(),
				ConfigurationIndex: configurationIndex,
			},
			Region:    st.region,
			ChunkSize: cs,
		},
	}
	if _, err := f.Write(appendSnapHeader(nil, cs)); err != nil {
		k.abort()
		return nil, fmt.Errorf("wal: region %d: write snapshot header: %w", st.region, err)
	}
	return k, nil
}

// List returns the region's complete snapshots, newest first (by term,
// index, then ID, as raft's FileSnapshotStore). A snapshot whose meta file
// is missing or fails its checksum, or whose data file has the wrong size
// (torn or truncated), is left out (and logged).
func (st *SnapshotStore) List() ([]*raft.SnapshotMeta, error) {
	metas, err := st.list()
	if err != nil {
		return nil, err
	}
	out := make([]*raft.SnapshotMeta, len(metas))
	for i, m := range metas {
		out[i] = &m.SnapshotMeta
	}
	return out, nil
}

// list returns the complete snapshots, newest first.
func (st *SnapshotStore) list() ([]*snapMetaFile, error) {
	names, err := st.s.fs.List(st.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wal: region %d: list snapshots: %w", st.region, err)
	}
	var metas []*snapMetaFile
	for _, name := range names {
		if strings.HasSuffix(name, snapTmpExt) {
			continue
		}
		m, err := st.readMeta(name)
		if err != nil {
			st.s.log.Warn("skipping an incomplete or corrupt snapshot", "region", st.region, "id", name, "err", err)
			continue
		}
		metas = append(metas, m)
	}
	slices.SortFunc(metas, func(a, b *snapMetaFile) int {
		return -cmp.Or(cmp.Compare(a.Term, b.Term), cmp.Compare(a.Index, b.Index), cmp.Compare(a.ID, b.ID))
	})
	return metas, nil
}

// readMeta reads and checks the meta file of snapshot id, and checks that
// its data file has the size the meta implies.
func (st *SnapshotStore) readMeta(id string) (*snapMetaFile, error) {
	fs := st.s.fs
	path := fs.PathJoin(st.dir, id, snapMetaName)
	b, err := readFile(fs, path)
	if err != nil {
		return nil, err
	}
	m, err := decodeMeta(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m.ID != id || m.Region != st.region {
		return nil, fmt.Errorf("%w: %s holds the meta of region %d snapshot %q", ErrCorruption, path, m.Region, m.ID)
	}
	fi, err := fs.Stat(fs.PathJoin(st.dir, id, snapDataName))
	if err != nil {
		return nil, err
	}
	if want := dataFileSize(m.Size, m.ChunkSize); fi.Size() != want {
		return nil, fmt.Errorf("%w: snapshot %s data file is %d bytes, want %d", ErrCorruption, id, fi.Size(), want)
	}
	return m, nil
}

// Open returns the meta of snapshot id and a reader of its stream. It
// checks the meta, the data file's size, header and trailer; the reader
// checks every chunk as it goes, and returns io.EOF only after the whole
// stream's length and CRC have matched. A checksum failure is an error
// wrapping ErrCorruption (from Open or Read); an unknown or incomplete id
// wraps ErrSnapshotNotFound. The caller must Close the reader.
func (st *SnapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, `/\`) || strings.HasSuffix(id, snapTmpExt) {
		return nil, nil, fmt.Errorf("%w: region %d: bad snapshot id %q", ErrSnapshotNotFound, st.region, id)
	}
	m, err := st.readMeta(id)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: region %d: %s: %w", ErrSnapshotNotFound, st.region, id, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("wal: region %d: open snapshot: %w", st.region, err)
	}
	r, err := openSnapReader(st.s.fs, st.s.fs.PathJoin(st.dir, id, snapDataName), m)
	if err != nil {
		return nil, nil, fmt.Errorf("wal: region %d: open snapshot %s: %w", st.region, id, err)
	}
	meta := m.SnapshotMeta
	return &meta, r, nil
}

// prune deletes the complete snapshots beyond the newest Retain.
func (st *SnapshotStore) prune() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	metas, err := st.list()
	if err != nil {
		return err
	}
	if len(metas) <= st.s.opts.Retain {
		return nil
	}
	fs := st.s.fs
	for _, m := range metas[st.s.opts.Retain:] {
		st.s.log.Info("removing an old snapshot", "region", st.region, "id", m.ID)
		if err := fs.RemoveAll(fs.PathJoin(st.dir, m.ID)); err != nil {
			return fmt.Errorf("wal: region %d: remove snapshot %s: %w", st.region, m.ID, err)
		}
	}
	return syncDir(fs, st.dir)
}

// syncDir fsyncs a directory, making the entries created, renamed or
// removed in it durable.
func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("wal: open dir %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("wal: sync dir %s: %w", dir, err)
	}
	return nil
}

// readFile reads a whole (small) file.
func readFile(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > metaHeaderLen+maxMetaJSONBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes", ErrCorruption, path, fi.Size())
	}
	b := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, err
	}
	return b, nil
}
