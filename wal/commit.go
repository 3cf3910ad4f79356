package wal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Group commit.
//
// Every write of every region ends in DB.commit, which makes its batch
// durable (pebble.Sync) before returning. Writers that arrive while a
// commit is in flight queue up; when it finishes, the first of them becomes
// the leader, merges the whole queue into one batch and commits it with one
// WAL fsync, then hands leadership to the next waiter, if any. So there is
// never more than one pebble Apply in flight, and N concurrent writers cost
// about one fsync per round, not N.
//
// Pebble's commit pipeline would group concurrent synced Applies by itself;
// it is not used that way on purpose: after a failed WAL sync, concurrent
// Applies in pebble v2.1.7 can panic (LogWriter.SyncRecord returns the
// latched error, commitWrite panics while holding the commit pipeline's
// mutex) and every other writer then blocks forever, DB.Close included.
// With one Apply at a time the Apply that meets the failure reports it
// (through pebbleLogger.Fatalf) and no other one is started.

// commitQueue is the group-commit queue of a DB.
type commitQueue struct {
	mu struct {
		sync.Mutex
		leading bool         // a goroutine is committing (or about to)
		queue   []*commitReq // waiting writers; queue[0] leads next
	}
}

// commitReq is one writer's batch waiting to be committed, or one span to
// excise (b nil).
type commitReq struct {
	b      *pebble.Batch
	excise pebble.KeyRange // when b is nil: the span DB.excise removes
	writes int             // acknowledged writes it carries, for Metrics
	done   chan error      // result; errLead means "you lead now"
}

// len is what the request adds to a merged group's batch.
func (r *commitReq) len() int {
	if r.b == nil {
		return 0
	}
	return r.b.Len()
}

// errLead tells a queued writer that it is the next leader.
var errLead = errors.New("wal: lead the next commit")

// maxGroupBytes caps the merged batch of one group commit (a batch above
// half the memtable size goes to pebble as a flushable batch anyway).
const maxGroupBytes = 8 << 20

// commit makes b durable: it returns nil once b is committed with
// pebble.Sync, or an error wrapping ErrSyncFailed (b may then or may not be
// durable and visible in pebble). The caller keeps ownership of b and
// closes it after commit returns. writes is what b counts for in Metrics.
func (db *DB) commit(b *pebble.Batch, writes int) error {
	return db.enqueue(&commitReq{b: b, writes: writes})
}

// excise removes every key in span from pebble, durably, without writing
// a range deletion (see LogStore.DeleteRange): pebble drops the files that
// lie wholly inside span and cuts the others into virtual sstables, so
// nothing has to be read back and compacted. It takes its turn in the
// commit queue like a write, alone (never merged into a group), so that
// there is still one pebble write in flight at a time. Its failure
// latches, as a write's does.
func (db *DB) excise(span pebble.KeyRange, writes int) error {
	return db.enqueue(&commitReq{excise: span, writes: writes})
}

// enqueue runs req in the commit queue (see commit).
func (db *DB) enqueue(req *commitReq) error {
	if err := db.Err(); err != nil {
		return err
	}
	req.done = make(chan error, 1)
	q := &db.cq
	q.mu.Lock()
	q.mu.queue = append(q.mu.queue, req)
	if q.mu.leading {
		q.mu.Unlock()
		if err := <-req.done; err != errLead {
			return err
		}
		q.mu.Lock()
	}
	// Lead: req is q.mu.queue[0]. Take a prefix of the queue as the group.
	q.mu.leading = true
	// An excise goes alone: it ends the group before it, and is a group
	// of its own when it is first.
	n, size := 0, 0
	for n < len(q.mu.queue) {
		r := q.mu.queue[n]
		if n > 0 && (r.b == nil || q.mu.queue[0].b == nil || size+r.len() > maxGroupBytes) {
			break
		}
		size += r.len()
		n++
	}
	group := q.mu.queue[:n:n]
	q.mu.queue = q.mu.queue[n:]
	q.mu.Unlock()

	err := db.commitGroup(group)
	for _, r := range group[1:] {
		r.done <- err
	}

	q.mu.Lock()
	if len(q.mu.queue) > 0 {
		q.mu.queue[0].done <- errLead
	} else {
		q.mu.leading = false
		q.mu.queue = nil
	}
	q.mu.Unlock()
	return err
}

// commitGroup commits the batches of group as one synced pebble batch.
func (db *DB) commitGroup(group []*commitReq) error {
	if err := db.Err(); err != nil {
		return err
	}
	if group[0].b == nil {
		return db.commitExcise(group[0])
	}
	b, writes := group[0].b, 0
	if len(group) > 1 {
		b = db.pdb.NewBatch()
		defer b.Close()
		for _, r := range group {
			if err := b.Apply(r.b, nil); err != nil {
				return fmt.Errorf("wal: merge batches for group commit: %w", err)
			}
		}
	}
	for _, r := range group {
		writes += r.writes
	}
	size := b.Len()
	start := time.Now()
	if err := db.apply(b); err != nil {
		db.fail(err)
	}
	// Fatalf (pebble's way to report a failed WAL sync) or the WAL file
	// itself may have latched during apply while Apply returned nil.
	if err := db.Err(); err != nil {
		return err
	}
	db.metrics.recordCommit(writes, size, time.Since(start))
	return nil
}

// commitExcise runs one excise request (the leader's, alone).
func (db *DB) commitExcise(r *commitReq) error {
	start := time.Now()
	if err := db.runExcise(r.excise); err != nil {
		db.fail(err)
	}
	if err := db.Err(); err != nil {
		return err
	}
	db.metrics.recordExcise(r.writes, time.Since(start))
	return nil
}

// runExcise is pebble's Excise with a panic turned into an error (as in
// apply). Pebble makes it durable before it returns: an excise that
// overlaps no memtable is one synced MANIFEST edit; one that overlaps a
// memtable is queued above it as a flushable ingest, recorded in a WAL
// that is synced (commitPipeline.directWrite) before Excise returns.
func (db *DB) runExcise(span pebble.KeyRange) (err error) {
	defer db.recoverPanic("excise", &err)
	if err := db.pdb.Excise(context.Background(), span); err != nil {
		return fmt.Errorf("pebble excise: %w", err)
	}
	return nil
}

// apply is pebble's Apply with a panic turned into an error. A panic means
// pebble's commit pipeline may be wedged: the DB is marked poisoned so that
// Close does not wait on it.
func (db *DB) apply(b *pebble.Batch) (err error) {
	defer db.recoverPanic("commit", &err)
	return db.pdb.Apply(b, pebble.Sync)
}

// recoverPanic, deferred, turns a panic of pebble's in what into *err
// and marks the DB poisoned (its commit pipeline may be wedged, so Close
// must not wait on it).
func (db *DB) recoverPanic(what string, err *error) {
	if r := recover(); r != nil {
		db.poisoned.Store(true)
		if e, ok := r.(error); ok {
			*err = fmt.Errorf("pebble panicked in %s: %w", what, e)
		} else {
			*err = fmt.Errorf("pebble panicked in %s: %v", what, r)
		}
	}
}
