package server

import (
	"encoding/binary"
	"fmt"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/wire"
)

// Every write to the region goes through apply, which takes an encoded
// write record and changes memory deterministically: the outcome depends
// only on the region's contents and the record (blink's node and extent
// allocation are deterministic), never on the time, the connection or the
// worker. Today workers encode a record and call apply under applyMu; with
// raft (DESIGN §9) the record becomes a log entry and apply the FSM's Apply,
// run in log order on every replica. Reads never take applyMu: blink
// readers are lock-free.
//
// A write record, little-endian at fixed offsets (a format that log
// entries will keep):
//
//	0  version u8 (1)        1 kind u8 (1 put, 2 delete)   2 reserved u16 (0)
//	4  key length u32
//	8  meganode Ptr u64      the header of the leaf meganode to change
//	16 client id u64         24 sequence u64   (at-most-once application,
//	                                            DESIGN §9; 0 = none)
//	32 value length u32      36 reserved u32 (0; delete: value length 0)
//	40 key, then value
const (
	recVersion    = 1
	recHeaderSize = 40

	recPut    = 1
	recDelete = 2
)

// writeRecord is a decoded write record; Key and Value alias the record.
type writeRecord struct {
	Kind     uint8
	Meganode blink.Ptr
	ClientID uint64
	Seq      uint64
	Key      []byte
	Value    []byte
}

var le = binary.LittleEndian

// appendRecord appends the encoding of r to dst.
func appendRecord(dst []byte, r *writeRecord) []byte {
	var h [recHeaderSize]byte
	h[0] = recVersion
	h[1] = r.Kind
	le.PutUint32(h[4:], uint32(len(r.Key)))
	le.PutUint64(h[8:], uint64(r.Meganode))
	le.PutUint64(h[16:], r.ClientID)
	le.PutUint64(h[24:], r.Seq)
	le.PutUint32(h[32:], uint32(len(r.Value)))
	dst = append(dst, h[:]...)
	dst = append(dst, r.Key...)
	return append(dst, r.Value...)
}

// decodeRecord parses a record; errors wrap ErrBadRecord. It never panics.
func decodeRecord(b []byte) (writeRecord, error) {
	if len(b) < recHeaderSize {
		return writeRecord{}, fmt.Errorf("server: %d-byte record: %w", len(b), ErrBadRecord)
	}
	if b[0] != recVersion || le.Uint16(b[2:]) != 0 || le.Uint32(b[36:]) != 0 {
		return writeRecord{}, fmt.Errorf("server: record version %d or reserved bits: %w", b[0], ErrBadRecord)
	}
	r := writeRecord{
		Kind:     b[1],
		Meganode: blink.Ptr(le.Uint64(b[8:])),
		ClientID: le.Uint64(b[16:]),
		Seq:      le.Uint64(b[24:]),
	}
	kl, vl := uint64(le.Uint32(b[4:])), uint64(le.Uint32(b[32:]))
	if recHeaderSize+kl+vl != uint64(len(b)) {
		return writeRecord{}, fmt.Errorf("server: record lengths %d+%d do not fill %d bytes: %w", kl, vl, len(b), ErrBadRecord)
	}
	r.Key = b[recHeaderSize : recHeaderSize+kl]
	r.Value = b[recHeaderSize+kl:]
	switch {
	case r.Kind != recPut && r.Kind != recDelete:
		return writeRecord{}, fmt.Errorf("server: record kind %d: %w", r.Kind, ErrBadRecord)
	case r.Kind == recDelete && vl != 0:
		return writeRecord{}, fmt.Errorf("server: delete record with a value: %w", ErrBadRecord)
	}
	return r, nil
}

// applyResult is what applying a record did.
type applyResult struct {
	// Found: a delete removed a key (false: the key was absent).
	Found bool
}

// apply applies an encoded write record to the region. It is the only
// writer of region memory once the server serves.
func (s *Server) apply(rec []byte) (applyResult, error) {
	r, err := decodeRecord(rec)
	if err != nil {
		return applyResult{}, err
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.applied.Add(1)
	lm := s.meganodeAt(r.Meganode)
	if lm == nil || lm.m.Ptr() != r.Meganode || lm.level != 0 {
		return applyResult{}, fmt.Errorf("server: record for %v, not a leaf meganode of region %d: %w", r.Meganode, s.regionID, ErrBadRecord)
	}
	var res applyResult
	kind := "put"
	switch r.Kind {
	case recPut:
		err = lm.t.Put(r.Key, r.Value)
	case recDelete:
		kind = "delete"
		res.Found, err = lm.t.Delete(r.Key)
	}
	s.metrics.applies.WithLabelValues(kind, wire.StatusOf(wireError(err)).String()).Inc()
	return res, err
}
