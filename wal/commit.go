package wal

import (
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

// commitReq is one writer's batch waiting to be committed.
type commitReq struct {
	b      *pebble.Batch
	writes int        // acknowledged writes it carries, for Metrics
	done   chan error // result; errLead means "you lead now"
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
	if err := db.Err(); err != nil {
		return err
	}
	req := &commitReq{b: b, writes: writes, done: make(chan error, 1)}
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
	n, size := 0, 0
	for n < len(q.mu.queue) && (n == 0 || size+q.mu.queue[n].b.Len() <= maxGroupBytes) {
		size += q.mu.queue[n].b.Len()
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

// apply is pebble's Apply with a panic turned into an error. A panic means
// pebble's commit pipeline may be wedged: the DB is marked poisoned so that
// Close does not wait on it.
func (db *DB) apply(b *pebble.Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			db.poisoned.Store(true)
			if e, ok := r.(error); ok {
				err = fmt.Errorf("pebble panicked in commit: %w", e)
			} else {
				err = fmt.Errorf("pebble panicked in commit: %v", r)
			}
		}
	}()
	return db.pdb.Apply(b, pebble.Sync)
}
