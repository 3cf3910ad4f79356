package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cellstore/cell/wire"
)

// Txn is a transaction over keys of one region (docs/transactions.md
// §4.9): optimistic, its reads recorded with the versions they saw, its
// writes buffered, the whole validated and applied by one record of the
// region's log at Commit. Reads see the transaction's own buffered
// writes. A Txn is not safe for concurrent use. Make one with
// Client.NewTxn, or let Client.Txn run a function in one and retry it on
// conflicts.
type Txn struct {
	c      *Client
	reads  map[string]uint64
	order  [][]byte // read keys, first read first
	ranges []wire.TxnRange
	writes map[string]*wire.TxnWrite
	bytes  int
	done   bool
	// moved: the attempt before this one ended in a conflict with cause
	// moved; a server that says the keys span regions again is believed.
	moved bool
}

// txnOverhead is a TxnRequest's fixed bytes; a read costs its key and
// 12 bytes, a range its bounds and 24, a write its key, value and 9.
const txnOverhead = 44

// NewTxn starts a transaction.
func (c *Client) NewTxn() *Txn {
	return &Txn{c: c, reads: map[string]uint64{}, writes: map[string]*wire.TxnWrite{}, bytes: txnOverhead}
}

func (t *Txn) grow(n int) error {
	if t.bytes+n > wire.MaxTxnBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTxnTooLarge, t.bytes+n, wire.MaxTxnBytes)
	}
	t.bytes += n
	return nil
}

// Get returns key's value and version as the transaction sees it: its own
// buffered write (a put's version is 0 until commit; a buffered delete is
// ErrNotFound), else the store's, recorded in the read set (a key not
// found as version 0) to be validated at Commit.
func (t *Txn) Get(ctx context.Context, key []byte) (KV, error) {
	if t.done {
		return KV{}, ErrTxnDone
	}
	if w, ok := t.writes[string(key)]; ok {
		if w.Op == wire.TxnDelete {
			return KV{}, errNotFound
		}
		return KV{Key: bytes.Clone(key), Value: bytes.Clone(w.Value)}, nil
	}
	kv, err := t.c.GetKV(ctx, key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return KV{}, err
	}
	if rerr := t.noteRead(key, kv.Version); rerr != nil {
		return KV{}, rerr
	}
	return kv, err
}

// noteRead records a read of key at version v (0: absent). A key read
// twice keeps its first version: should the second differ, Commit fails
// anyway (versions never repeat).
func (t *Txn) noteRead(key []byte, v uint64) error {
	if _, ok := t.reads[string(key)]; ok {
		return nil
	}
	if len(t.reads) >= wire.MaxTxnReads {
		return fmt.Errorf("%w: more than %d keys read", ErrTxnTooLarge, wire.MaxTxnReads)
	}
	if err := t.grow(len(key) + 12); err != nil {
		return err
	}
	t.reads[string(key)] = v
	t.order = append(t.order, bytes.Clone(key))
	return nil
}

// Range returns the pairs of [start, end) as the transaction sees them:
// the store's first opts.Limit pairs (Limit is required: a transaction's
// read set is bounded), read with their versions and recorded to be
// validated at Commit (the same keys with the same versions, so an insert
// among them is a phantom that fails the commit), merged with the
// transaction's buffered writes (a buffered delete may leave fewer than
// Limit pairs). Reverse is not supported. A nil start is the least key.
func (t *Txn) Range(ctx context.Context, start, end []byte, opts RangeOptions) ([]KV, error) {
	if t.done {
		return nil, ErrTxnDone
	}
	if opts.Limit <= 0 || opts.Reverse {
		return nil, wrapErr(ErrInvalidConfig, errors.New("a transaction's Range needs RangeOptions.Limit > 0 and no Reverse"))
	}
	start, end, err := opts.bounds(start, end)
	if err != nil {
		return nil, err
	}
	if len(start) == 0 {
		start = []byte{0}
	}
	if len(t.ranges) >= wire.MaxTxnRanges {
		return nil, fmt.Errorf("%w: more than %d range reads", ErrTxnTooLarge, wire.MaxTxnRanges)
	}
	if err := t.grow(len(start) + len(end) + 24); err != nil {
		return nil, err
	}
	ro := opts
	ro.Prefix, ro.Versions = false, true
	pairs, resume, err := t.c.Range(ctx, start, end, ro)
	if err != nil {
		t.bytes -= len(start) + len(end) + 24
		return nil, err
	}
	limit := uint32(opts.Limit)
	if resume != nil && len(pairs) < opts.Limit {
		if len(pairs) == 0 {
			t.bytes -= len(start) + len(end) + 24
			return nil, wrapErr(ErrServer, errors.New("a range page with no pairs and a resume key"))
		}
		limit = uint32(len(pairs)) // the client saw these first pairs
	}
	h := wire.NewRangeHash()
	for _, kv := range pairs {
		h = h.Add(kv.Key, kv.Version)
	}
	t.ranges = append(t.ranges, wire.TxnRange{Start: bytes.Clone(start), End: bytes.Clone(end), Limit: limit, Count: uint32(len(pairs)), Hash: uint64(h)})
	// Merge the buffer.
	inRange := func(k []byte) bool {
		return bytes.Compare(k, start) >= 0 && (len(end) == 0 || bytes.Compare(k, end) < 0)
	}
	seen := map[string]bool{}
	out := pairs[:0:0]
	for _, kv := range pairs {
		if w, ok := t.writes[string(kv.Key)]; ok {
			seen[string(kv.Key)] = true
			if w.Op == wire.TxnDelete {
				continue
			}
			kv = KV{Key: kv.Key, Value: bytes.Clone(w.Value)}
		}
		if opts.KeysOnly {
			kv.Value = []byte{}
		}
		out = append(out, kv)
	}
	var last []byte
	if len(pairs) > 0 && len(pairs) == int(limit) {
		last = pairs[len(pairs)-1].Key // the store's pairs past it were not read
	}
	for k, w := range t.writes {
		if seen[k] || w.Op != wire.TxnPut || !inRange([]byte(k)) || last != nil && k > string(last) {
			continue
		}
		v := bytes.Clone(w.Value)
		if opts.KeysOnly {
			v = []byte{}
		}
		out = append(out, KV{Key: []byte(k), Value: v})
	}
	slices.SortFunc(out, func(a, b KV) int { return bytes.Compare(a.Key, b.Key) })
	if len(out) > opts.Limit {
		out = out[:opts.Limit]
	}
	return out, nil
}

// Put buffers a put of value under key (the arguments are copied);
// nothing is sent before Commit.
func (t *Txn) Put(key, value []byte) error {
	if err := checkValue(value); err != nil {
		return err
	}
	return t.buffer(wire.TxnPut, key, value)
}

// Delete buffers a delete of key.
func (t *Txn) Delete(key []byte) error { return t.buffer(wire.TxnDelete, key, nil) }

func (t *Txn) buffer(op wire.TxnWriteOp, key, value []byte) error {
	if t.done {
		return ErrTxnDone
	}
	if err := checkKey(t.c.topo.Load(), key); err != nil {
		return err
	}
	old, ok := t.writes[string(key)]
	n := len(key) + len(value) + 9
	if ok {
		n -= len(old.Key) + len(old.Value) + 9
	} else if len(t.writes) >= wire.MaxTxnWrites {
		return fmt.Errorf("%w: more than %d keys written", ErrTxnTooLarge, wire.MaxTxnWrites)
	}
	if err := t.grow(n); err != nil {
		return err
	}
	t.writes[string(key)] = &wire.TxnWrite{Op: op, Key: bytes.Clone(key), Value: bytes.Clone(value)}
	return nil
}

// Rollback ends the transaction without committing: nothing was sent
// but reads, so nothing is undone.
func (t *Txn) Rollback() { t.done = true }

// Commit validates the transaction's reads and applies its writes in one
// record of its region's log, and returns nil when it committed. A
// transaction that read or wrote nothing commits at once. Errors:
// ErrTxnConflict (a *TxnError: nothing applied; run it again),
// ErrTxnSpansRegions (its keys are in more than one region), ErrTxnDone,
// ErrOutcomeUnknown (the commit was sent and its answer lost: it may have
// applied), and a write's other errors.
//
// A read-only transaction is validated the same way: its commit is a
// record without writes, which costs a log entry (serving it under the
// region's read lease instead is left for later).
func (t *Txn) Commit(ctx context.Context) error {
	if t.done {
		return ErrTxnDone
	}
	t.done = true
	if len(t.reads) == 0 && len(t.ranges) == 0 && len(t.writes) == 0 {
		return nil
	}
	req := &wire.TxnRequest{}
	if !t.c.cfg.TestingKnobs.TxnSkipValidation {
		for _, k := range t.order {
			req.Reads = append(req.Reads, wire.TxnRead{Key: k, Version: t.reads[string(k)]})
		}
		req.Ranges = t.ranges
	}
	for _, w := range t.writes {
		req.Writes = append(req.Writes, *w)
	}
	slices.SortFunc(req.Writes, func(a, b wire.TxnWrite) int { return bytes.Compare(a.Key, b.Key) })
	least := req.MinKey()
	if least == nil {
		return nil // validation skipped and nothing written
	}
	if err := t.c.checkOneRegion(ctx, req); err != nil {
		return err
	}
	_, err := t.c.writeOp(ctx, writeReq{kind: opPut, key: least, txn: req})
	if errors.Is(err, wire.ErrTxnSpansRegions) {
		t.c.forgetTxnKeys(req)
		if t.moved {
			return wrapErr(ErrTxnSpansRegions, err)
		}
		return &TxnError{Cause: "moved"}
	}
	return err
}

// txnKeys yields the keys a transaction request names.
func txnKeys(req *wire.TxnRequest, yield func([]byte) bool) {
	for _, r := range req.Reads {
		if !yield(r.Key) {
			return
		}
	}
	for _, r := range req.Ranges {
		if !yield(r.Start) {
			return
		}
	}
	for _, w := range req.Writes {
		if !yield(w.Key) {
			return
		}
	}
}

// checkOneRegion locates every key of req (from the path cache, else by
// a locating search) and returns ErrTxnSpansRegions when they are in more
// than one region. With a single server there is nothing to compare: the
// server checks.
func (c *Client) checkOneRegion(ctx context.Context, req *wire.TxnRequest) error {
	if len(c.topo.Load().servers) == 1 {
		return nil
	}
	var region uint32
	var first []byte
	var err error
	txnKeys(req, func(k []byte) bool {
		var r uint32
		if info, ok := c.paths.lookup(k); ok && info.level == 0 {
			r = uint32(info.ptr.Region())
		} else {
			res, serr := c.searchOp(ctx, opLocate, k, nil, c.now(), searchFlags{})
			if serr != nil {
				err = serr
				return false
			}
			r = uint32(res.leaf.Region())
		}
		if first == nil {
			region, first = r, k
		} else if r != region {
			err = fmt.Errorf("%w: %q is in region %d, %q in region %d", ErrTxnSpansRegions, first, region, k, r)
			return false
		}
		return true
	})
	return err
}

// forgetTxnKeys drops the cached leaves of req's keys, so that the next
// attempt locates them afresh.
func (c *Client) forgetTxnKeys(req *wire.TxnRequest) {
	txnKeys(req, func(k []byte) bool {
		if info, ok := c.paths.lookup(k); ok {
			c.paths.drop(info.ptr)
		}
		return true
	})
}

// Txn runs fn in a new transaction and commits it; on ErrTxnConflict it
// runs fn again in a new transaction after an exponential backoff with
// jitter (1 ms doubling to 100 ms), until it commits or ctx's deadline
// would pass (then the last conflict is returned). fn must have no effect
// outside the transaction but its reads; an error fn returns rolls the
// transaction back, ends the loop and is returned.
func (c *Client) Txn(ctx context.Context, fn func(ctx context.Context, t *Txn) error) error {
	moved := false
	for attempt := 0; ; attempt++ {
		t := c.NewTxn()
		t.moved = moved
		if err := fn(ctx, t); err != nil {
			t.Rollback()
			return err
		}
		err := t.Commit(ctx)
		var te *TxnError
		if err == nil || !errors.As(err, &te) {
			return err
		}
		moved = te.Cause == "moved"
		d := min(time.Millisecond<<min(attempt, 7), 100*time.Millisecond)
		d = d/2 + rand.N(d/2+1)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			return err
		}
		tm := time.NewTimer(d)
		select {
		case <-ctx.Done():
			tm.Stop()
			return err
		case <-tm.C:
		}
	}
}
