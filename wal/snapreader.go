package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// snapReader reads a snapshot's stream back from its data file, checking
// each chunk's CRC before handing out any of its bytes, and the trailer
// (stream length, stream CRC, chunk count) before returning io.EOF. Every
// mismatch is a sticky error wrapping ErrCorruption. Not safe for
// concurrent use.
type snapReader struct {
	f    vfs.File
	path string
	meta *snapMetaFile

	hdr   [chunkHeaderLen]byte
	buf   []byte // the current chunk's payload
	pos   int    // bytes of buf handed out
	total uint64 // payload bytes read so far
	crc   uint32 // CRC of the payload read so far
	n     uint32 // chunks read so far
	err   error  // sticky; io.EOF at a verified end
}

// openSnapReader opens path and checks its size, header and trailer
// against m.
func openSnapReader(fs vfs.FS, path string, m *snapMetaFile) (*snapReader, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	r := &snapReader{f: f, path: path, meta: m}
	if err := r.checkEnds(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return r, nil
}

// checkEnds checks the file's size, header and trailer, and leaves the
// file positioned after the header.
func (r *snapReader) checkEnds() error {
	fi, err := r.f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if want := dataFileSize(r.meta.Size, r.meta.ChunkSize); size != want {
		return fmt.Errorf("%w: data file is %d bytes, want %d", ErrCorruption, size, want)
	}
	var hdr [snapHeaderLen]byte
	if _, err := io.ReadFull(r.f, hdr[:]); err != nil {
		return fmt.Errorf("%w: read header: %w", ErrCorruption, err)
	}
	cs, err := parseSnapHeader(hdr[:])
	if err != nil {
		return err
	}
	if cs != r.meta.ChunkSize {
		return fmt.Errorf("%w: data file chunk size %d, meta says %d", ErrCorruption, cs, r.meta.ChunkSize)
	}
	var tb [trailerLen]byte
	if _, err := r.f.ReadAt(tb[:], size-trailerLen); err != nil {
		return fmt.Errorf("%w: read trailer: %w", ErrCorruption, err)
	}
	t, err := parseTrailer(tb[:])
	if err != nil {
		return err
	}
	if t.total != uint64(r.meta.Size) || t.streamCRC != r.meta.DataCRC || int64(t.chunks) != chunkCount(r.meta.Size, cs) {
		return fmt.Errorf("%w: trailer (%d bytes, crc %#x, %d chunks) disagrees with meta (%d bytes, crc %#x)",
			ErrCorruption, t.total, t.streamCRC, t.chunks, r.meta.Size, r.meta.DataCRC)
	}
	r.buf = make([]byte, 0, cs)
	return nil
}

// Read implements io.Reader.
func (r *snapReader) Read(p []byte) (int, error) {
	for r.pos == len(r.buf) {
		if r.err != nil {
			return 0, r.err
		}
		r.err = r.next()
	}
	n := copy(p, r.buf[r.pos:])
	r.pos += n
	return n, nil
}

// next reads and checks the next chunk into r.buf, or checks the trailer
// and returns io.EOF.
func (r *snapReader) next() error {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrCorruption, r.path}, args...)...)
	}
	if _, err := io.ReadFull(r.f, r.hdr[:]); err != nil {
		return corrupt("chunk %d header: %w", r.n, err)
	}
	n := binary.LittleEndian.Uint32(r.hdr[:])
	if n == 0 {
		return r.trailer(corrupt)
	}
	if n > uint32(cap(r.buf)) || r.total+uint64(n) > uint64(r.meta.Size) {
		return corrupt("chunk %d of %d bytes (chunk size %d, %d of %d bytes read)", r.n, n, cap(r.buf), r.total, r.meta.Size)
	}
	r.buf, r.pos = r.buf[:n], 0
	if _, err := io.ReadFull(r.f, r.buf); err != nil {
		r.buf = r.buf[:0]
		return corrupt("chunk %d payload: %w", r.n, err)
	}
	if got, want := chunkCRC(r.hdr[:4], r.buf), binary.LittleEndian.Uint32(r.hdr[4:]); got != want {
		r.buf = r.buf[:0]
		return corrupt("chunk %d crc %#x, stored %#x", r.n, got, want)
	}
	r.crc = crc32.Update(r.crc, castagnoli, r.buf)
	r.total += uint64(n)
	r.n++
	return nil
}

// trailer checks the trailer (whose first 8 bytes are in r.hdr) against
// what was read, and that the file ends there.
func (r *snapReader) trailer(corrupt func(string, ...any) error) error {
	var tb [trailerLen]byte
	copy(tb[:], r.hdr[:])
	if _, err := io.ReadFull(r.f, tb[chunkHeaderLen:]); err != nil {
		return corrupt("trailer: %w", err)
	}
	t, err := parseTrailer(tb[:])
	if err != nil {
		return corrupt("%w", err)
	}
	if t.total != r.total || t.streamCRC != r.crc || t.chunks != r.n || r.total != uint64(r.meta.Size) {
		return corrupt("stream of %d bytes (crc %#x, %d chunks) read, trailer says %d bytes (crc %#x, %d chunks), meta %d bytes",
			r.total, r.crc, r.n, t.total, t.streamCRC, t.chunks, r.meta.Size)
	}
	var one [1]byte
	if n, err := r.f.Read(one[:]); n != 0 || !errors.Is(err, io.EOF) {
		return corrupt("bytes after the trailer")
	}
	return io.EOF
}

// Close closes the data file. A second Close is a no-op (raft closes the
// reader again when FSM.Restore, which closes it too, fails).
func (r *snapReader) Close() error {
	if r.f == nil {
		return nil
	}
	f := r.f
	r.f, r.buf, r.pos, r.err = nil, nil, 0, ErrSnapshotClosed
	return f.Close()
}
