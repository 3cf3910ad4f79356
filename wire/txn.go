package wire

import (
	"bytes"
	"fmt"

	"github.com/cellstore/cell/blink"
)

// Bounds of a TxnRequest (docs/limits.md): a request past any of them is
// malformed (BadRequest), checked before anything is proposed. The Go
// client checks them as the transaction buffers its reads and writes.
const (
	MaxTxnReads  = 1024    // read keys
	MaxTxnRanges = 64      // range reads
	MaxTxnWrites = 1024    // written keys
	MaxTxnBytes  = 4 << 20 // the whole request body, keys and values
)

// TxnWriteOp is what a transaction's write does.
type TxnWriteOp uint8

const (
	TxnPut    TxnWriteOp = 1
	TxnDelete TxnWriteOp = 2
)

// TxnCause says why a transaction did not commit (TxnReply.Cause).
type TxnCause uint8

const (
	TxnCommitted TxnCause = 0 // no cause: it committed
	TxnVersion   TxnCause = 1 // a read key's version changed
	TxnPhantom   TxnCause = 2 // a range read's keys or versions changed
)

func (c TxnCause) String() string {
	switch c {
	case TxnCommitted:
		return "committed"
	case TxnVersion:
		return "version"
	case TxnPhantom:
		return "phantom"
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// TxnRead is a key a transaction read, with the version it read (0: read
// as absent).
type TxnRead struct {
	Key     []byte
	Version uint64
}

// TxnRange is a range read of a transaction: the keys in [Start, End) (an
// empty End is unbounded; Start is a key, at least "\x00"), the first Limit of them when Limit >
// 0, of which the client saw Count, whose (key, version) pairs hash to
// Hash (RangeHash).
type TxnRange struct {
	Start, End   []byte
	Limit, Count uint32
	Hash         uint64
}

// TxnWrite is a buffered write of a transaction: a put of Value under Key
// or a delete of Key (Value empty).
type TxnWrite struct {
	Op    TxnWriteOp
	Key   []byte
	Value []byte
}

// TxnRequest (OpTxn) commits a single-region transaction
// (docs/transactions.md §4.9): the region checks, in the apply of one
// record, that every read key still has the version read and every range
// read the same pairs, and if so applies every write with one version.
// Every key must be in the region of the leaf meganode Ptr (0: the
// server finds it from the transaction's least key); a key elsewhere is
// StatusTxnSpansRegions. It carries a client id and sequence as
// PutRequest does (at most once).
//
//	[ptr u64][epoch u64][client id u64][seq u64]
//	[read count u32]  each [key bytes][version u64]
//	[range count u32] each [start bytes][end bytes][limit u32][count u32][hash u64]
//	[write count u32] each [op u8][key bytes][value bytes]
//
// Counts are bounded by MaxTxnReads, MaxTxnRanges and MaxTxnWrites; a
// range's Count is at most its Limit when Limit > 0; a delete has an
// empty value.
type TxnRequest struct {
	Ptr      blink.Ptr
	Epoch    uint64
	ClientID uint64
	Seq      uint64
	Reads    []TxnRead
	Ranges   []TxnRange
	Writes   []TxnWrite
}

func (m *TxnRequest) AppendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Ptr))
	b = appendU64(b, m.Epoch)
	b = appendU64(b, m.ClientID)
	b = appendU64(b, m.Seq)
	b = appendU32(b, uint32(len(m.Reads)))
	for _, r := range m.Reads {
		b = appendBytes(b, r.Key)
		b = appendU64(b, r.Version)
	}
	b = appendU32(b, uint32(len(m.Ranges)))
	for _, r := range m.Ranges {
		b = appendBytes(b, r.Start)
		b = appendBytes(b, r.End)
		b = appendU32(b, r.Limit)
		b = appendU32(b, r.Count)
		b = appendU64(b, r.Hash)
	}
	b = appendU32(b, uint32(len(m.Writes)))
	for _, w := range m.Writes {
		b = appendU8(b, uint8(w.Op))
		b = appendBytes(b, w.Key)
		b = appendBytes(b, w.Value)
	}
	return b
}

func (m *TxnRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("txn request")
}

func (m *TxnRequest) decode(d *decoder) {
	if len(d.b) > MaxTxnBytes {
		d.failf("txn request of %d bytes, limit %d", len(d.b), MaxTxnBytes)
		return
	}
	m.Ptr = blink.Ptr(d.u64("ptr"))
	m.Epoch = d.u64("epoch")
	m.ClientID = d.u64("client id")
	m.Seq = d.u64("seq")
	n := d.count(12, "txn reads")
	if n > MaxTxnReads {
		d.failf("%d txn reads, limit %d", n, MaxTxnReads)
		return
	}
	m.Reads = m.Reads[:0]
	for range n {
		m.Reads = append(m.Reads, TxnRead{Key: d.bytes("read key"), Version: d.u64("read version")})
	}
	n = d.count(24, "txn ranges")
	if n > MaxTxnRanges {
		d.failf("%d txn ranges, limit %d", n, MaxTxnRanges)
		return
	}
	m.Ranges = m.Ranges[:0]
	for range n {
		m.Ranges = append(m.Ranges, TxnRange{Start: d.bytes("range start"), End: d.bytes("range end"),
			Limit: d.u32("range limit"), Count: d.u32("range count"), Hash: d.u64("range hash")})
	}
	n = d.count(9, "txn writes")
	if n > MaxTxnWrites {
		d.failf("%d txn writes, limit %d", n, MaxTxnWrites)
		return
	}
	m.Writes = m.Writes[:0]
	for range n {
		m.Writes = append(m.Writes, TxnWrite{Op: TxnWriteOp(d.u8("write op")), Key: d.bytes("write key"), Value: d.bytes("write value")})
	}
	if d.err == nil {
		if err := m.Check(); err != nil {
			d.failf("%v", err)
		}
	}
}

// Check reports a request that breaks a rule of OpTxn: counts past the
// limits, an unknown write op, a delete with a value, a range whose count
// exceeds its limit, without a start or whose end is not above its start.
func (m *TxnRequest) Check() error {
	switch {
	case len(m.Reads) > MaxTxnReads:
		return fmt.Errorf("%d txn reads, limit %d", len(m.Reads), MaxTxnReads)
	case len(m.Ranges) > MaxTxnRanges:
		return fmt.Errorf("%d txn ranges, limit %d", len(m.Ranges), MaxTxnRanges)
	case len(m.Writes) > MaxTxnWrites:
		return fmt.Errorf("%d txn writes, limit %d", len(m.Writes), MaxTxnWrites)
	}
	for _, r := range m.Ranges {
		if r.Limit > 0 && r.Count > r.Limit {
			return fmt.Errorf("a txn range with count %d over its limit %d", r.Count, r.Limit)
		}
		if len(r.Start) == 0 {
			return fmt.Errorf("a txn range without a start (the least key is \"\\x00\")")
		}
		if len(r.End) > 0 && bytes.Compare(r.Start, r.End) >= 0 {
			return fmt.Errorf("a txn range [%q, %q) that is empty", r.Start, r.End)
		}
	}
	for _, w := range m.Writes {
		switch {
		case w.Op != TxnPut && w.Op != TxnDelete:
			return fmt.Errorf("txn write op %d", w.Op)
		case w.Op == TxnDelete && len(w.Value) > 0:
			return fmt.Errorf("a txn delete with a value")
		}
	}
	return nil
}

// MinKey returns the least key the request names (a read, a range start,
// a write; nil when it names none): the server starts its search there.
func (m *TxnRequest) MinKey() (key []byte) {
	for _, r := range m.Reads {
		if key == nil || bytes.Compare(r.Key, key) < 0 {
			key = r.Key
		}
	}
	for _, r := range m.Ranges {
		if key == nil || bytes.Compare(r.Start, key) < 0 {
			key = r.Start
		}
	}
	for _, w := range m.Writes {
		if key == nil || bytes.Compare(w.Key, key) < 0 {
			key = w.Key
		}
	}
	return key
}

// TxnReply answers OpTxn: whether the transaction committed, and if it
// did the version its puts got (0 when it wrote no key with a value);
// if it did not, why (Cause): nothing changed. Not committing is a
// definite answer, not an error.
//
//	[committed u8][cause u8][version u64]
//
// A committed reply has cause 0; one that did not commit a known cause
// and version 0.
type TxnReply struct {
	Committed bool
	Cause     TxnCause
	Version   uint64
}

func (m *TxnReply) AppendTo(b []byte) []byte {
	return appendU64(appendU8(appendBool(b, m.Committed), uint8(m.Cause)), m.Version)
}

func (m *TxnReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("txn reply")
}

func (m *TxnReply) decode(d *decoder) {
	m.Committed = d.bool("committed")
	m.Cause = TxnCause(d.u8("cause"))
	m.Version = d.u64("version")
	switch {
	case d.err != nil:
	case m.Committed && m.Cause != TxnCommitted:
		d.failf("txn reply: committed with cause %d", m.Cause)
	case !m.Committed && (m.Cause != TxnVersion && m.Cause != TxnPhantom || m.Version != 0):
		d.failf("txn reply: not committed with cause %d, version %d", m.Cause, m.Version)
	}
}

// RangeHash is the hash of a range read's (key, version) pairs that
// TxnRange.Hash carries (blink.RangeHash: the client and the region's
// apply both compute it).
type RangeHash = blink.RangeHash

// NewRangeHash returns the hash of no pairs.
func NewRangeHash() RangeHash { return blink.NewRangeHash() }
