package wal

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"

	"github.com/hashicorp/raft"
)

// This file fixes the two files of a snapshot. The constants below are part
// of Cell's on-disk format (pinned by testdata/snapshot.golden).
//
// A region's snapshots live in Dir/<region as %08x>/<id>/, each holding
// "data" and "meta". A snapshot is written in Dir/<region>/<id>.tmp/ and
// renamed into place only once both files and the directory are synced.
//
// All integers little-endian; CRCs are CRC-32C (Castagnoli).
//
// # Data file
//
//	 header (16 bytes):
//	 0                        8             12              16
//	 +------------------------+-------------+---------------+
//	 | magic "CELLSNPD"       | version u32 | chunk size u32|
//	 +------------------------+-------------+---------------+
//
//	 chunks, in order, each holding 1..chunk size bytes of the stream (only
//	 the last may be short):
//	 0            4            8
//	 +------------+------------+---------------------------+
//	 | length u32 | crc u32    | payload [length bytes]    |
//	 | (n >= 1)   | CRC of the | ...                       |
//	 |            | length's 4 |                           |
//	 |            | bytes, then|                           |
//	 |            | payload    |                           |
//	 +------------+------------+---------------------------+
//
//	 trailer (24 bytes), marked by a zero length:
//	 0            4            8                   16          20          24
//	 +------------+------------+-------------------+-----------+-----------+
//	 | 0 u32      | crc u32 of | total length u64  | stream    | chunk     |
//	 |            | bytes 8..24|                   | crc u32   | count u32 |
//	 +------------+------------+-------------------+-----------+-----------+
//
// The file ends right after the trailer, so its size is a function of the
// stream's length and the chunk size (dataFileSize): List rejects a data
// file of any other size, Open checks the trailer, and the reader checks
// every chunk and, before it returns io.EOF, the stream's length and CRC.
//
// # Meta file
//
//	 0                        8             12             16            20
//	 +------------------------+-------------+--------------+-------------+
//	 | magic "CELLSNPM"       | version u32 | JSON len u32 | JSON crc u32|
//	 +------------------------+-------------+--------------+-------------+
//	 20: JSON of snapMetaFile (raft.SnapshotMeta's fields, Configuration
//	     included, plus Region, ChunkSize, DataCRC); the file ends there.

// Snapshot file layout.
const (
	snapDataMagic    = "CELLSNPD"
	snapMetaMagic    = "CELLSNPM"
	snapVersion      = 1
	snapHeaderLen    = 16
	chunkHeaderLen   = 8
	trailerLen       = 24
	metaHeaderLen    = 20
	maxMetaJSONBytes = 64 << 20

	snapDataName = "data"
	snapMetaName = "meta"
	snapTmpExt   = ".tmp"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapMetaFile is the JSON of a meta file.
type snapMetaFile struct {
	raft.SnapshotMeta
	// Region is the region the snapshot belongs to (a check on its path).
	Region uint32
	// ChunkSize is the data file's chunk size (also in its header).
	ChunkSize int
	// DataCRC is the CRC-32C of the whole stream (also in the trailer).
	DataCRC uint32
}

// chunkCount is the number of chunks of a stream of size bytes.
func chunkCount(size int64, chunkSize int) int64 {
	return (size + int64(chunkSize) - 1) / int64(chunkSize)
}

// dataFileSize is the size of the data file of a stream of size bytes.
func dataFileSize(size int64, chunkSize int) int64 {
	return snapHeaderLen + size + chunkHeaderLen*chunkCount(size, chunkSize) + trailerLen
}

func appendSnapHeader(dst []byte, chunkSize int) []byte {
	dst = append(dst, snapDataMagic...)
	dst = binary.LittleEndian.AppendUint32(dst, snapVersion)
	return binary.LittleEndian.AppendUint32(dst, uint32(chunkSize))
}

// parseSnapHeader returns the chunk size of a data file header.
func parseSnapHeader(b []byte) (int, error) {
	if len(b) != snapHeaderLen || string(b[:8]) != snapDataMagic {
		return 0, fmt.Errorf("%w: not a snapshot data header: %x", ErrCorruption, b)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != snapVersion {
		return 0, fmt.Errorf("%w: snapshot data version %d, want %d", ErrCorruption, v, snapVersion)
	}
	cs := binary.LittleEndian.Uint32(b[12:])
	if cs < 1 || cs > MaxChunkSize {
		return 0, fmt.Errorf("%w: snapshot chunk size %d", ErrCorruption, cs)
	}
	return int(cs), nil
}

// chunkCRC is the CRC of a chunk: its length's 4 bytes, then its payload.
func chunkCRC(lenBytes, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(lenBytes, castagnoli), castagnoli, payload)
}

// putChunkHeader fills b[:8] for the payload b[8:].
func putChunkHeader(b []byte) {
	binary.LittleEndian.PutUint32(b, uint32(len(b)-chunkHeaderLen))
	binary.LittleEndian.PutUint32(b[4:], chunkCRC(b[:4], b[chunkHeaderLen:]))
}

// trailer is the end of a data file.
type trailer struct {
	total     uint64
	streamCRC uint32
	chunks    uint32
}

func appendTrailer(dst []byte, t trailer) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, 8)...)
	dst = binary.LittleEndian.AppendUint64(dst, t.total)
	dst = binary.LittleEndian.AppendUint32(dst, t.streamCRC)
	dst = binary.LittleEndian.AppendUint32(dst, t.chunks)
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(dst[start+8:], castagnoli))
	return dst
}

// parseTrailer decodes the last 24 bytes of a data file.
func parseTrailer(b []byte) (trailer, error) {
	le := binary.LittleEndian
	if len(b) != trailerLen || le.Uint32(b) != 0 {
		return trailer{}, fmt.Errorf("%w: no snapshot trailer (a torn data file?)", ErrCorruption)
	}
	if got, want := crc32.Checksum(b[8:], castagnoli), le.Uint32(b[4:]); got != want {
		return trailer{}, fmt.Errorf("%w: snapshot trailer crc %#x, stored %#x", ErrCorruption, got, want)
	}
	return trailer{total: le.Uint64(b[8:]), streamCRC: le.Uint32(b[16:]), chunks: le.Uint32(b[20:])}, nil
}

// encodeMeta returns the bytes of a meta file.
func encodeMeta(m *snapMetaFile) ([]byte, error) {
	js, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("wal: encode snapshot meta: %w", err)
	}
	b := append([]byte(nil), snapMetaMagic...)
	b = binary.LittleEndian.AppendUint32(b, snapVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(js)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(js, castagnoli))
	return append(b, js...), nil
}

// decodeMeta decodes the bytes of a meta file; every error wraps
// ErrCorruption.
func decodeMeta(b []byte) (*snapMetaFile, error) {
	le := binary.LittleEndian
	if len(b) < metaHeaderLen || string(b[:8]) != snapMetaMagic {
		return nil, fmt.Errorf("%w: not a snapshot meta file (%d bytes)", ErrCorruption, len(b))
	}
	if v := le.Uint32(b[8:]); v != snapVersion {
		return nil, fmt.Errorf("%w: snapshot meta version %d, want %d", ErrCorruption, v, snapVersion)
	}
	n := le.Uint32(b[12:])
	if uint64(len(b)) != metaHeaderLen+uint64(n) {
		return nil, fmt.Errorf("%w: snapshot meta of %d bytes, header says %d", ErrCorruption, len(b), metaHeaderLen+uint64(n))
	}
	js := b[metaHeaderLen:]
	if got, want := crc32.Checksum(js, castagnoli), le.Uint32(b[16:]); got != want {
		return nil, fmt.Errorf("%w: snapshot meta crc %#x, stored %#x", ErrCorruption, got, want)
	}
	var m snapMetaFile
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, fmt.Errorf("%w: snapshot meta JSON: %w", ErrCorruption, err)
	}
	if m.ChunkSize < 1 || m.ChunkSize > MaxChunkSize || m.Size < 0 {
		return nil, fmt.Errorf("%w: snapshot meta chunk size %d, size %d", ErrCorruption, m.ChunkSize, m.Size)
	}
	return &m, nil
}
