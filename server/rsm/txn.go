package rsm

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cellstore/cell/blink"
)

const txnBodySize = 16

// Bounds of a txn record's body: the same as a wire TxnRequest's
// (server.TestTxnBoundsAgree holds them equal).
const (
	MaxTxnReads  = 1024
	MaxTxnRanges = 64
	MaxTxnWrites = 1024
)

// TxnRead is a key a transaction read, with the version it read (0: read
// as absent).
type TxnRead struct {
	Key     []byte
	Version uint64
}

// TxnRange is a range read: the keys in [Start, End) (an empty End is
// unbounded; Start is a key), the first Limit of them when Limit > 0, of
// which the client saw Count, whose (key, version) pairs hash to Hash
// (blink.RangeHash).
type TxnRange struct {
	Start, End   []byte
	Limit, Count uint32
	Hash         uint64
}

// TxnWriteOp is what a transaction's write does; the values are wire's.
type TxnWriteOp uint8

const (
	TxnPut    TxnWriteOp = 1
	TxnDelete TxnWriteOp = 2
)

// TxnWrite is a put of Value under Key or a delete of Key.
type TxnWrite struct {
	Op    TxnWriteOp
	Key   []byte
	Value []byte
}

// TxnCause says why a txn record did not commit (Result.TxnCause); the
// values are wire's.
const (
	TxnVersion = 1 // a read key's version changed
	TxnPhantom = 2 // a range read's keys or versions changed
)

// TxnBody is the value of a txn record (kind 12): the transaction's read
// set and writes. Keys and values alias the record.
type TxnBody struct {
	Reads  []TxnRead
	Ranges []TxnRange
	Writes []TxnWrite
}

// AppendTxnBody appends the encoding of b.
func AppendTxnBody(dst []byte, b *TxnBody) []byte {
	var h [txnBodySize]byte
	le.PutUint32(h[4:], uint32(len(b.Reads)))
	le.PutUint32(h[8:], uint32(len(b.Ranges)))
	le.PutUint32(h[12:], uint32(len(b.Writes)))
	dst = append(dst, h[:]...)
	for _, r := range b.Reads {
		dst = le.AppendUint32(dst, uint32(len(r.Key)))
		dst = append(dst, r.Key...)
		dst = le.AppendUint64(dst, r.Version)
	}
	for _, r := range b.Ranges {
		dst = le.AppendUint32(dst, uint32(len(r.Start)))
		dst = append(dst, r.Start...)
		dst = le.AppendUint32(dst, uint32(len(r.End)))
		dst = append(dst, r.End...)
		dst = le.AppendUint32(dst, r.Limit)
		dst = le.AppendUint32(dst, r.Count)
		dst = le.AppendUint64(dst, r.Hash)
	}
	for _, w := range b.Writes {
		dst = append(dst, byte(w.Op))
		dst = le.AppendUint32(dst, uint32(len(w.Key)))
		dst = append(dst, w.Key...)
		dst = le.AppendUint32(dst, uint32(len(w.Value)))
		dst = append(dst, w.Value...)
	}
	return dst
}

// DecodeTxnBody decodes and checks a txn body; errors wrap ErrBadRecord.
// It never panics.
func DecodeTxnBody(v []byte) (TxnBody, error) {
	bad := func(what string) (TxnBody, error) {
		return TxnBody{}, fmt.Errorf("rsm: txn body: %s: %w", what, ErrBadRecord)
	}
	if len(v) < txnBodySize {
		return bad(fmt.Sprintf("%d bytes", len(v)))
	}
	if le.Uint32(v) != 0 {
		return bad("flags or reserved bits")
	}
	nr, ng, nw := le.Uint32(v[4:]), le.Uint32(v[8:]), le.Uint32(v[12:])
	if nr > MaxTxnReads || ng > MaxTxnRanges || nw > MaxTxnWrites {
		return bad(fmt.Sprintf("%d reads, %d ranges, %d writes", nr, ng, nw))
	}
	b := v[txnBodySize:]
	ok := true
	take := func(n uint64) []byte {
		if !ok || uint64(len(b)) < n {
			ok = false
			return nil
		}
		p := b[:n:n]
		b = b[n:]
		return p
	}
	u32 := func() uint32 {
		if p := take(4); p != nil {
			return le.Uint32(p)
		}
		return 0
	}
	u64 := func() uint64 {
		if p := take(8); p != nil {
			return le.Uint64(p)
		}
		return 0
	}
	bytesField := func() []byte {
		n := u32()
		p := take(uint64(n))
		if len(p) == 0 {
			return nil
		}
		return p
	}
	var t TxnBody
	if uint64(nr)*12+uint64(ng)*24+uint64(nw)*9 > uint64(len(b)) {
		return bad("counts past the end")
	}
	t.Reads = make([]TxnRead, 0, nr)
	for range nr {
		t.Reads = append(t.Reads, TxnRead{Key: bytesField(), Version: u64()})
	}
	t.Ranges = make([]TxnRange, 0, ng)
	for range ng {
		t.Ranges = append(t.Ranges, TxnRange{Start: bytesField(), End: bytesField(), Limit: u32(), Count: u32(), Hash: u64()})
	}
	t.Writes = make([]TxnWrite, 0, nw)
	for range nw {
		var op uint8
		if p := take(1); p != nil {
			op = p[0]
		}
		t.Writes = append(t.Writes, TxnWrite{Op: TxnWriteOp(op), Key: bytesField(), Value: bytesField()})
	}
	switch {
	case !ok:
		return bad("truncated")
	case len(b) != 0:
		return bad(fmt.Sprintf("%d bytes after the writes", len(b)))
	}
	for _, r := range t.Reads {
		if len(r.Key) == 0 {
			return bad("an empty read key")
		}
	}
	for _, w := range t.Writes {
		if len(w.Key) == 0 {
			return bad("an empty write key")
		}
	}
	if err := t.check(); err != nil {
		return bad(err.Error())
	}
	return t, nil
}

// check reports a body that is not well formed, as wire's
// TxnRequest.Check does: ranges past their limit, without a start or
// empty; writes of an unknown op; deletes with a value.
func (t *TxnBody) check() error {
	for _, r := range t.Ranges {
		if r.Limit > 0 && r.Count > r.Limit {
			return fmt.Errorf("a txn range with count %d over its limit %d", r.Count, r.Limit)
		}
		if len(r.Start) == 0 {
			return fmt.Errorf("a txn range without a start")
		}
		if len(r.End) > 0 && bytes.Compare(r.Start, r.End) >= 0 {
			return fmt.Errorf("a txn range [%q, %q) that is empty", r.Start, r.End)
		}
	}
	for _, w := range t.Writes {
		switch {
		case w.Op != TxnPut && w.Op != TxnDelete:
			return fmt.Errorf("txn write op %d", w.Op)
		case w.Op == TxnDelete && len(w.Value) > 0:
			return fmt.Errorf("a txn delete with a value")
		}
	}
	return nil
}

// FullError is a txn record's refusal for want of room or by a split's
// freeze (Err: blink.ErrNeedsSplit, blink.ErrFrozen) in leaf meganode
// Meganode, which may not be the record's: the server asks for that
// meganode's split.
type FullError struct {
	Meganode blink.Ptr
	Err      error
}

func (e *FullError) Error() string {
	return fmt.Sprintf("rsm: txn writes into %v: %v", e.Meganode, e.Err)
}
func (e *FullError) Unwrap() error { return e.Err }

// maxTxnHops bounds the right links a txn record's key search follows
// from the record's meganode.
const maxTxnHops = 1 << 16

// leafOfLocked returns the leaf meganode of this region that holds key,
// searching from leaf meganode start by right links: ErrTxnMoved when the
// key is left of start or its search leaves the region. REQUIRES: m.mu
// held.
func (m *Machine) leafOfLocked(start *Meganode, key []byte) (*Meganode, error) {
	lm := start
	for range maxTxnHops {
		res, err := lm.T.Search(key)
		if errors.Is(err, blink.ErrKeyOutOfRange) {
			return nil, fmt.Errorf("key %q below meganode %v: %w", key, lm.Ptr(), ErrTxnMoved)
		}
		if err != nil {
			return nil, err
		}
		if res.Next.IsNil() {
			return lm, nil
		}
		nl := m.MeganodeAt(res.Next)
		if nl == nil || nl.Level != 0 {
			return nil, fmt.Errorf("key %q continues at %v: %w", key, res.Next, ErrTxnMoved)
		}
		lm = nl
	}
	return nil, fmt.Errorf("rsm: search for %q crossed %d meganodes: %w", key, maxTxnHops, blink.ErrCorruption)
}

// rangeHashLocked hashes the (key, version) pairs of rg's range as they
// are now, the first rg.Limit of them when it is not 0, and counts them.
// A range that runs into another region is ErrTxnSpansRegions.
// REQUIRES: m.mu held.
func (m *Machine) rangeHashLocked(start *Meganode, rg *TxnRange) (blink.RangeHash, uint32, error) {
	h, n := blink.NewRangeHash(), uint32(0)
	lm, err := m.leafOfLocked(start, rg.Start)
	if err != nil {
		return h, n, err
	}
	from := rg.Start
	for range maxTxnHops {
		it := lm.T.NewIter(&blink.IterOptions{Lower: from, Upper: rg.End})
		for ok := it.First(); ok; ok = it.Next() {
			if rg.Limit > 0 && n == rg.Limit {
				it.Close()
				return h, n, nil
			}
			h = h.Add(it.Key(), it.Word().Version())
			n++
		}
		if err := it.Error(); err != nil {
			it.Close()
			return h, n, err
		}
		edge, more := it.Edge()
		next := it.Boundary()
		from = bytes.Clone(edge)
		it.Close()
		if !more {
			return h, n, nil
		}
		if next.IsNil() {
			lm, err = m.leafOfLocked(start, from)
			if errors.Is(err, ErrTxnMoved) {
				return h, n, fmt.Errorf("range [%q, %q) at %q: %w", rg.Start, rg.End, from, ErrTxnSpansRegions)
			}
			if err != nil {
				return h, n, err
			}
			continue
		}
		if lm = m.MeganodeAt(next); lm == nil || lm.Level != 0 {
			return h, n, fmt.Errorf("range [%q, %q) continues at %v: %w", rg.Start, rg.End, next, ErrTxnSpansRegions)
		}
	}
	return h, n, fmt.Errorf("rsm: range [%q, %q) crossed %d meganodes: %w", rg.Start, rg.End, maxTxnHops, blink.ErrCorruption)
}

// txnLocked applies a txn record at index whose least key is in leaf
// meganode start (docs/transactions.md §4.9): it finds every write's
// meganode (ErrTxnMoved for a key not in the region), validates every
// read and range (a failure changes nothing and answers its cause), checks
// that every write can apply (ErrFrozen, ErrNeedsSplit: nothing changed,
// the server parks and retries the record), then applies every write
// with one version from the clock. REQUIRES: m.mu held.
func (m *Machine) txnLocked(start *Meganode, index uint64, b *TxnBody) (Result, error) {
	if !m.state.Versioned() {
		return Result{}, ErrNotVersioned
	}
	leaves := make([]*Meganode, len(b.Writes))
	for i, w := range b.Writes {
		lm, err := m.leafOfLocked(start, w.Key)
		if err != nil {
			return Result{}, err
		}
		leaves[i] = lm
	}
	for _, r := range b.Reads {
		lm, err := m.leafOfLocked(start, r.Key)
		if err != nil {
			return Result{}, err
		}
		res, err := lm.T.Search(r.Key)
		if err != nil {
			return Result{}, err
		}
		var v uint64
		if res.Found {
			v = res.Word.Version()
		}
		if v != r.Version {
			return Result{TxnCause: uint8(TxnVersion), Version: 0}, nil
		}
	}
	for i := range b.Ranges {
		rg := &b.Ranges[i]
		h, n, err := m.rangeHashLocked(start, rg)
		if err != nil {
			return Result{}, err
		}
		if n != rg.Count || uint64(h) != rg.Hash {
			return Result{TxnCause: uint8(TxnPhantom)}, nil
		}
	}
	if len(b.Writes) == 0 {
		return Result{}, nil
	}
	// Room for every write, per meganode, before the first.
	var keys [][]byte
	var puts []bool
	for i, lm := range leaves {
		if lm == nil {
			continue
		}
		keys, puts = keys[:0], puts[:0]
		for j := i; j < len(leaves); j++ {
			if leaves[j] == lm {
				keys = append(keys, b.Writes[j].Key)
				puts = append(puts, b.Writes[j].Op == TxnPut)
				if j > i {
					leaves[j] = nil // checked with lm's
				}
			}
		}
		if err := lm.T.RoomForWrites(keys, puts); err != nil {
			return Result{}, &FullError{Meganode: lm.Ptr(), Err: err}
		}
	}
	// Room for every record, in the region's extents, before the first.
	if err := m.reserveExtentsLocked(b.Writes); err != nil {
		return Result{}, err
	}
	v := max(index, m.state.Clock+1)
	var res Result
	for _, w := range b.Writes {
		lm, err := m.leafOfLocked(start, w.Key)
		if err != nil {
			return Result{}, fmt.Errorf("rsm: txn write of %q after its check: %v: %w", w.Key, err, blink.ErrCorruption)
		}
		if w.Op == TxnDelete {
			_, err = lm.T.Delete(w.Key)
		} else {
			err = lm.T.PutWord(w.Key, w.Value, blink.MakeWord(v, false, false))
			res.Version = v
		}
		if err != nil {
			// RoomForWrites said it would apply: the transaction is
			// half applied, which the check exists to prevent.
			return Result{}, fmt.Errorf("rsm: txn write of %q after its check: %v: %w", w.Key, err, blink.ErrCorruption)
		}
	}
	if res.Version != 0 {
		m.state.Clock = v
	}
	return res, nil
}

// reserveExtentsLocked reports whether the records of writes' puts can all
// be allocated in the region's extents: it allocates them, in write order
// and of the sizes blink's puts will ask for, then frees them again (the
// allocator's state changes the same way on every replica: apply stays
// deterministic). The writes themselves then allocate the same sizes in
// the same order with at least as much free (a delete or an overwrite only
// frees), so a transaction never meets ErrExtentsFull halfway: it is
// refused whole, changing nothing. REQUIRES: m.mu held.
func (m *Machine) reserveExtentsLocked(writes []TxnWrite) error {
	ext := m.region.Extents()
	type block struct {
		off uint64
		n   int
	}
	var got []block
	defer func() {
		for _, b := range got {
			ext.Free(b.off, b.n)
		}
	}()
	for _, w := range writes {
		if w.Op != TxnPut {
			continue
		}
		n := (blink.ExtentLen(len(w.Key), len(w.Value)) + 7) &^ 7
		off, err := ext.Alloc(n)
		if err != nil {
			return fmt.Errorf("rsm: the transaction's %d puts do not fit the region's extents: %w", len(got)+1, err)
		}
		got = append(got, block{off, n})
	}
	return nil
}
