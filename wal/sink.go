package wal

import (
	"fmt"
	"hash/crc32"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// sink is the raft.SnapshotSink of one snapshot being written. It streams:
// Write fills one chunk buffer (ChunkSize bytes) and writes each full chunk,
// framed with its length and CRC, to Dir/<region>/<id>.tmp/data.
//
// Close writes the last chunk and the trailer, syncs the data file, writes
// and syncs the meta file, syncs the temporary directory, renames it to
// Dir/<region>/<id>, and syncs the region directory and Dir: when Close
// returns nil the snapshot survives a crash. It then prunes the region to
// the newest Retain snapshots (a failure there is logged, not returned: the
// new snapshot is durable either way). When Close returns an error, the
// temporary directory is removed and the snapshot does not exist.
//
// Cancel removes the temporary directory. A second Close after a successful
// one returns nil (raft's takeSnapshot closes the sink that the FSM's
// Persist already closed); after a Cancel or a failed Close, Close returns
// ErrSinkClosed, so a snapshot that does not exist is never reported
// complete. Write after either returns ErrSinkClosed; Cancel after either
// returns nil.
//
// Concurrency: a sink is used by one goroutine at a time (raft's FSM
// snapshot's Persist).
type sink struct {
	st   *SnapshotStore
	tmp  string   // the temporary directory
	f    vfs.File // the data file, nil once closed
	buf  []byte   // chunk header (8 bytes) + up to ChunkSize payload bytes
	meta snapMetaFile

	streamCRC uint32
	chunks    uint32
	err       error // sticky: the first write error
	done      bool  // Close or Cancel was called
	complete  bool  // Close succeeded
	renamed   bool  // the directory was renamed into place
}

// ID returns the snapshot's ID: "<term>-<index>-<unix nanos>", unique in
// the Snapshots (the timestamp only grows).
func (k *sink) ID() string { return k.meta.ID }

// Write appends p to the snapshot's stream.
func (k *sink) Write(p []byte) (int, error) {
	if k.done {
		return 0, ErrSinkClosed
	}
	if k.err != nil {
		return 0, k.err
	}
	written := 0
	for len(p) > 0 {
		n := min(len(p), cap(k.buf)-len(k.buf))
		k.buf = append(k.buf, p[:n]...)
		p = p[n:]
		written += n
		if len(k.buf) == cap(k.buf) {
			if err := k.flushChunk(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// flushChunk writes the buffered chunk, if any.
func (k *sink) flushChunk() error {
	payload := k.buf[chunkHeaderLen:]
	if len(payload) == 0 {
		return nil
	}
	putChunkHeader(k.buf)
	// Hash before writing: the buffer is not ours to read afterwards (pebble's
	// MemFS scribbles over written buffers when its invariants are on, as
	// under -race, to catch exactly this).
	k.streamCRC = crc32.Update(k.streamCRC, castagnoli, payload)
	if _, err := k.f.Write(k.buf); err != nil {
		k.err = fmt.Errorf("wal: region %d: snapshot %s: write chunk: %w", k.st.region, k.meta.ID, err)
		return k.err
	}
	k.meta.Size += int64(len(payload))
	k.chunks++
	k.buf = k.buf[:chunkHeaderLen]
	return nil
}

// Close finalizes the snapshot; see sink.
func (k *sink) Close() error {
	if k.done {
		if k.complete {
			return nil
		}
		return ErrSinkClosed
	}
	if err := k.finish(); err != nil {
		_ = k.abort()
		return err
	}
	k.done, k.complete = true, true
	if err := k.st.prune(); err != nil {
		k.st.s.log.Warn("pruning old snapshots failed", "region", k.st.region, "err", err)
	}
	return nil
}

// finish does Close's durable part.
func (k *sink) finish() error {
	if k.err != nil {
		return k.err
	}
	fs := k.st.s.fs
	wrap := func(what string, err error) error {
		return fmt.Errorf("wal: region %d: snapshot %s: %s: %w", k.st.region, k.meta.ID, what, err)
	}
	if err := k.flushChunk(); err != nil {
		return err
	}
	k.meta.DataCRC = k.streamCRC
	if _, err := k.f.Write(appendTrailer(nil, trailer{total: uint64(k.meta.Size), streamCRC: k.streamCRC, chunks: k.chunks})); err != nil {
		return wrap("write trailer", err)
	}
	if err := k.f.Sync(); err != nil {
		return wrap("sync data", err)
	}
	err := k.f.Close()
	k.f = nil
	if err != nil {
		return wrap("close data", err)
	}
	mb, err := encodeMeta(&k.meta)
	if err != nil {
		return err
	}
	if err := writeFileSynced(fs, fs.PathJoin(k.tmp, snapMetaName), mb); err != nil {
		return wrap("write meta", err)
	}
	if err := syncDir(fs, k.tmp); err != nil {
		return err
	}
	if err := fs.Rename(k.tmp, k.final()); err != nil {
		return wrap("rename into place", err)
	}
	k.renamed = true
	if err := syncDir(fs, k.st.dir); err != nil {
		return err
	}
	return syncDir(fs, k.st.s.opts.Dir)
}

// Cancel abandons the snapshot and removes its temporary directory.
func (k *sink) Cancel() error {
	if k.done {
		return nil
	}
	return k.abort()
}

// final is the snapshot's directory once complete.
func (k *sink) final() string { return k.st.s.fs.PathJoin(k.st.dir, k.meta.ID) }

// abort closes the data file and removes the temporary directory (or the
// final one, if Close failed after renaming it).
func (k *sink) abort() error {
	k.done = true
	if k.f != nil {
		_ = k.f.Close()
		k.f = nil
	}
	dir := k.tmp
	if k.renamed {
		dir = k.final()
	}
	if err := k.st.s.fs.RemoveAll(dir); err != nil {
		return fmt.Errorf("wal: region %d: snapshot %s: remove temporary dir: %w", k.st.region, k.meta.ID, err)
	}
	return nil
}

// writeFileSynced creates path with contents b and syncs it.
func writeFileSynced(fs vfs.FS, path string, b []byte) error {
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
