package wal

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/raft"
)

// This file fixes the keys and the log record format of the pebble store.
// The constants below are part of Cell's on-disk format: a change here is a
// format change (pinned by the golden test in testdata/log.golden), and needs
// a new formatVersion and a migration.
//
// # Keys
//
// Every key starts with a one-byte kind, then (except kindMeta) the region ID
// as 4 bytes BIG-endian, so that pebble's bytewise order groups a region's
// keys together and orders log keys by index:
//
//	 0      1                5                                   13
//	 +------+----------------+-----------------------------------+
//	 | 0x01 | region u32 BE  | index u64 BE                      |   log entry
//	 +------+----------------+-----------------------------------+
//	 | 0x02 | region u32 BE  | raft's stable key (any bytes) ... |   stable value
//	 +------+----------------+-----------------------------------+
//	 | 0x03 | region u32 BE  |                                       commit index
//	 +------+----------------+
//	 | 0x00 | "format"       |                                       meta: u32 LE formatVersion
//	 +------+----------------+
//
// A region's log keys are exactly [logKey(r, 0), logUpper(r)) and its stable
// keys [stableKey(r, nil), stableUpper(r)); every iterator of one region is
// bounded to one of those ranges. Region IDs are 24-bit in Cell but stored as
// uint32, so any uint32 works here.
//
// Stable values are raft's bytes as given (Set), or 8 bytes u64
// little-endian (SetUint64). The commit index (raft.CommitTrackingLogStore)
// is 8 bytes u64 little-endian.
//
// # Log record (the value of a log key)
//
// All integers little-endian, fixed offsets:
//
//	 0     1     2           4                 8
//	 +-----+-----+-----------+-----------------+
//	 | ver |type | reserved  | data length D   |
//	 | u8  | u8  | u16 = 0   | u32             |
//	 +-----+-----+-----------+-----------------+
//	 8                                        16
//	 +-----------------------------------------+
//	 | index u64                               |
//	 +-----------------------------------------+
//	 16                                       24
//	 +-----------------------------------------+
//	 | term u64                                |
//	 +-----------------------------------------+
//	 24                                       32
//	 +-----------------------------------------+
//	 | appendedAt i64, unix nanoseconds        |
//	 | (0 = the zero time.Time)                |
//	 +-----------------------------------------+
//	 32                36                     40
//	 +-----------------+-----------------------+
//	 | extensions      | reserved u32 = 0      |
//	 | length E u32    |                       |
//	 +-----------------+-----------------------+
//	 40: data [D bytes], then extensions [E bytes]; the record is exactly
//	     40+D+E bytes long.
//
//	 ver (byte 0):  recordVersion (1)
//	 type (byte 1): raft.LogType, any value (stored as given)
//
// The record carries no checksum of its own: pebble checksums its WAL
// records and sstable blocks. The decoder checks the version, the reserved
// fields and every length against the buffer, and so re-encodes any record
// it accepts byte for byte (FuzzDecodeLog).

// formatVersion is the version of the key layout and record formats,
// stored under metaFormatKey at the first Open.
const formatVersion = 1

// Key kinds (byte 0 of every key).
const (
	kindMeta   = 0x00
	kindLog    = 0x01
	kindStable = 0x02
	kindCommit = 0x03

	kindFirstRegion = kindLog    // the first kind with region keys
	kindLastRegion  = kindCommit // the last one
)

// Key layout.
const (
	keyPrefixLen = 5 // kind + region
	logKeyLen    = keyPrefixLen + 8
)

// metaFormatKey holds formatVersion (u32 LE).
var metaFormatKey = []byte("\x00format")

// Log record layout.
const (
	recordVersion = 1

	offRecVersion = 0
	offRecType    = 1
	offRecRsv16   = 2
	offRecDataLen = 4
	offRecIndex   = 8
	offRecTerm    = 16
	offRecAppend  = 24
	offRecExtLen  = 32
	offRecRsv32   = 36
	recHeaderLen  = 40
)

// regionPrefix returns the 5-byte prefix of kind for region.
func regionPrefix(kind byte, region uint32) []byte {
	k := make([]byte, keyPrefixLen, logKeyLen)
	k[0] = kind
	binary.BigEndian.PutUint32(k[1:], region)
	return k
}

// prefixUpper returns the smallest key greater than every key that starts
// with the 5-byte prefix of (kind, region).
func prefixUpper(kind byte, region uint32) []byte {
	if region == math.MaxUint32 {
		return []byte{kind + 1}
	}
	return regionPrefix(kind, region+1)
}

// logKey returns the key of region's log entry at index.
func logKey(region uint32, index uint64) []byte {
	return appendLogKey(make([]byte, 0, logKeyLen), region, index)
}

func appendLogKey(dst []byte, region uint32, index uint64) []byte {
	dst = append(dst, kindLog)
	dst = binary.BigEndian.AppendUint32(dst, region)
	return binary.BigEndian.AppendUint64(dst, index)
}

// logUpper is the exclusive upper bound of region's log keys.
func logUpper(region uint32) []byte { return prefixUpper(kindLog, region) }

// stableKey returns the key of region's stable value named key.
func stableKey(region uint32, key []byte) []byte {
	return append(regionPrefix(kindStable, region), key...)
}

// stableUpper is the exclusive upper bound of region's stable keys.
func stableUpper(region uint32) []byte { return prefixUpper(kindStable, region) }

// commitKey is the key of region's commit index.
func commitKey(region uint32) []byte { return regionPrefix(kindCommit, region) }

// parseLogKey returns the region and index of a log key.
func parseLogKey(k []byte) (region uint32, index uint64, err error) {
	if len(k) != logKeyLen || k[0] != kindLog {
		return 0, 0, fmt.Errorf("%w: bad log key %x", ErrCorruption, k)
	}
	return binary.BigEndian.Uint32(k[1:]), binary.BigEndian.Uint64(k[keyPrefixLen:]), nil
}

// encodedLogLen returns the length of l's record, or ErrTooLarge.
func encodedLogLen(l *raft.Log) (int, error) {
	if uint64(len(l.Data)) > math.MaxUint32 || uint64(len(l.Extensions)) > math.MaxUint32 {
		return 0, fmt.Errorf("%w: index %d: data %d bytes, extensions %d bytes",
			ErrTooLarge, l.Index, len(l.Data), len(l.Extensions))
	}
	return recHeaderLen + len(l.Data) + len(l.Extensions), nil
}

// encodeLog writes l's record into b, which must be exactly
// encodedLogLen(l) bytes long.
func encodeLog(b []byte, l *raft.Log) {
	le := binary.LittleEndian
	b[offRecVersion] = recordVersion
	b[offRecType] = byte(l.Type)
	le.PutUint16(b[offRecRsv16:], 0)
	le.PutUint32(b[offRecDataLen:], uint32(len(l.Data)))
	le.PutUint64(b[offRecIndex:], l.Index)
	le.PutUint64(b[offRecTerm:], l.Term)
	le.PutUint64(b[offRecAppend:], uint64(unixNanos(l.AppendedAt)))
	le.PutUint32(b[offRecExtLen:], uint32(len(l.Extensions)))
	le.PutUint32(b[offRecRsv32:], 0)
	n := copy(b[recHeaderLen:], l.Data)
	copy(b[recHeaderLen+n:], l.Extensions)
}

// appendLog appends l's record to dst.
func appendLog(dst []byte, l *raft.Log) ([]byte, error) {
	n, err := encodedLogLen(l)
	if err != nil {
		return dst, err
	}
	start := len(dst)
	dst = append(dst, make([]byte, n)...)
	encodeLog(dst[start:], l)
	return dst, nil
}

// decodeLog decodes the record b into l. l's Data and Extensions are fresh
// copies (the caller may let b go); a zero length decodes as nil. Every
// error wraps ErrCorruption.
func decodeLog(b []byte, l *raft.Log) error {
	le := binary.LittleEndian
	if len(b) < recHeaderLen {
		return fmt.Errorf("%w: log record of %d bytes, shorter than its %d-byte header", ErrCorruption, len(b), recHeaderLen)
	}
	if b[offRecVersion] != recordVersion {
		return fmt.Errorf("%w: log record version %d, want %d", ErrCorruption, b[offRecVersion], recordVersion)
	}
	if le.Uint16(b[offRecRsv16:]) != 0 || le.Uint32(b[offRecRsv32:]) != 0 {
		return fmt.Errorf("%w: log record reserved fields not zero", ErrCorruption)
	}
	dataLen := uint64(le.Uint32(b[offRecDataLen:]))
	extLen := uint64(le.Uint32(b[offRecExtLen:]))
	if want := recHeaderLen + dataLen + extLen; uint64(len(b)) != want {
		return fmt.Errorf("%w: log record of %d bytes, header says %d (data %d, extensions %d)",
			ErrCorruption, len(b), want, dataLen, extLen)
	}
	*l = raft.Log{
		Index:      le.Uint64(b[offRecIndex:]),
		Term:       le.Uint64(b[offRecTerm:]),
		Type:       raft.LogType(b[offRecType]),
		AppendedAt: fromUnixNanos(int64(le.Uint64(b[offRecAppend:]))),
	}
	if dataLen+extLen > 0 {
		buf := make([]byte, dataLen+extLen)
		copy(buf, b[recHeaderLen:])
		if dataLen > 0 {
			l.Data = buf[:dataLen:dataLen]
		}
		if extLen > 0 {
			l.Extensions = buf[dataLen:]
		}
	}
	return nil
}

// unixNanos is t in unix nanoseconds, 0 for the zero time.
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromUnixNanos inverts unixNanos (the instant 1970-01-01T00:00:00Z itself
// comes back as the zero time).
func fromUnixNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// putUint64 is the stable value format of SetUint64.
func putUint64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
