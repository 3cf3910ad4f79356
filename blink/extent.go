package blink

import (
	"encoding/binary"
	"fmt"
	"hash/crc64"
)

// An extent record holds one key-value pair in the region's extent area:
//
//	0 keyLen u32 | 4 valLen u32 | 8 key | 8+keyLen value
//
// The leaf entry that points to the record keeps the record's length and its
// CRC-64 (ECMA polynomial), so a one-sided reader that fetched the record
// while it was being rewritten detects it and re-reads (Pilaf's technique,
// paper §2.3). Records start 8-byte aligned; the space after the record up to
// the end of its block is undefined.
const extentHeader = 8

var crcTable = crc64.MakeTable(crc64.ECMA)

// ExtentLen returns the length of the record for a key and value.
func ExtentLen(keyLen, valLen int) int { return extentHeader + keyLen + valLen }

// EncodeExtent writes the record for key and value into dst, which must be
// at least ExtentLen bytes, and returns the record's CRC.
func EncodeExtent(dst, key, value []byte) uint64 {
	n := ExtentLen(len(key), len(value))
	binary.LittleEndian.PutUint32(dst[0:], uint32(len(key)))
	binary.LittleEndian.PutUint32(dst[4:], uint32(len(value)))
	copy(dst[extentHeader:], key)
	copy(dst[extentHeader+len(key):], value)
	return crc64.Checksum(dst[:n], crcTable)
}

// ExtentCRC returns the CRC-64 of a record's bytes.
func ExtentCRC(rec []byte) uint64 { return crc64.Checksum(rec, crcTable) }

// DecodeExtent checks rec (exactly the record's bytes, as long as the leaf
// entry says) against the CRC from the leaf entry and returns its key and
// value, which alias rec. A mismatch returns an error wrapping ErrTorn when
// the CRC differs (the record changed under the reader: re-read) and
// ErrCorruption when the CRC matches but the lengths do not fit. It never
// panics.
func DecodeExtent(rec []byte, crc uint64) (key, value []byte, err error) {
	if len(rec) < extentHeader {
		return nil, nil, fmt.Errorf("extent of %d bytes: %w", len(rec), ErrCorruption)
	}
	if ExtentCRC(rec) != crc {
		return nil, nil, fmt.Errorf("extent CRC mismatch: %w", ErrTorn)
	}
	return parseExtent(rec)
}

// parseExtent splits a record into key and value without a CRC check.
func parseExtent(rec []byte) (key, value []byte, err error) {
	if len(rec) < extentHeader {
		return nil, nil, fmt.Errorf("extent of %d bytes: %w", len(rec), ErrCorruption)
	}
	kl := uint64(binary.LittleEndian.Uint32(rec[0:]))
	vl := uint64(binary.LittleEndian.Uint32(rec[4:]))
	if extentHeader+kl+vl != uint64(len(rec)) {
		return nil, nil, fmt.Errorf("extent lengths %d+%d do not fill %d bytes: %w", kl, vl, len(rec), ErrCorruption)
	}
	return rec[extentHeader : extentHeader+kl], rec[extentHeader+kl:], nil
}
