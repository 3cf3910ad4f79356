package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// Single-region transactions, docs/transactions.md §4.9: one txn record
// validates the read set and applies the writes with one version.

// txnCause returns the cause of a conflict, failing the test for any
// other outcome.
func txnCause(t *testing.T, err error) string {
	t.Helper()
	var te *client.TxnError
	if !errors.As(err, &te) || !errors.Is(err, client.ErrTxnConflict) {
		t.Fatalf("got %v, want a transaction conflict", err)
	}
	return te.Cause
}

// TestTxnBasics: writes commit with one version; reads see the buffer;
// a read key changed (and an ABA: deleted and written again with the
// same value) aborts; a read-only transaction validates; a transaction
// that conflicts applies nothing.
func TestTxnBasics(t *testing.T) {
	s, store := newTestServer(t)
	waitVersioned(t, s)
	c := newClient(t, store, "server")
	ctx := ctxT(t)
	if err := c.Put(ctx, []byte("t/a"), []byte("1")); err != nil {
		t.Fatal(err)
	}

	tx := c.NewTxn()
	a, err := tx.Get(ctx, []byte("t/a"))
	if err != nil || string(a.Value) != "1" {
		t.Fatalf("get: %q, %v", a.Value, err)
	}
	if _, err := tx.Get(ctx, []byte("t/b")); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get of an absent key: %v", err)
	}
	if err := tx.Put([]byte("t/a"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("t/b"), []byte("3")); err != nil {
		t.Fatal(err)
	}
	if kv, err := tx.Get(ctx, []byte("t/b")); err != nil || string(kv.Value) != "3" {
		t.Fatalf("read of a buffered write: %q, %v", kv.Value, err)
	}
	if kvs, err := tx.Range(ctx, []byte("t/"), nil, client.RangeOptions{Limit: 10}); err != nil || len(kvs) != 2 || string(kvs[0].Value) != "2" || string(kvs[1].Value) != "3" {
		t.Fatalf("range over buffered writes: %v, %v", kvs, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ka, _ := c.GetKV(ctx, []byte("t/a"))
	kb, _ := c.GetKV(ctx, []byte("t/b"))
	if string(ka.Value) != "2" || string(kb.Value) != "3" || ka.Version != kb.Version || ka.Version <= a.Version {
		t.Fatalf("after commit: %q @%d, %q @%d (read @%d)", ka.Value, ka.Version, kb.Value, kb.Version, a.Version)
	}
	if err := tx.Commit(ctx); !errors.Is(err, client.ErrTxnDone) {
		t.Fatalf("second commit: %v", err)
	}

	// ABA: t/a deleted and written again with its value between the
	// read and the commit.
	tx = c.NewTxn()
	if _, err := tx.Get(ctx, []byte("t/a")); err != nil {
		t.Fatal(err)
	}
	_ = tx.Put([]byte("t/c"), []byte("x"))
	if err := c.Delete(ctx, []byte("t/a")); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, []byte("t/a"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if cause := txnCause(t, tx.Commit(ctx)); cause != "version" {
		t.Fatalf("ABA: cause %q", cause)
	}
	if _, err := c.Get(ctx, []byte("t/c")); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("an aborted transaction's write applied: %v", err)
	}

	// Read-only: valid, then invalid.
	tx = c.NewTxn()
	if _, err := tx.Get(ctx, []byte("t/b")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("read-only commit: %v", err)
	}
	tx = c.NewTxn()
	if _, err := tx.Get(ctx, []byte("t/b")); err != nil {
		t.Fatal(err)
	}
	_ = c.Put(ctx, []byte("t/b"), []byte("4"))
	txnCause(t, tx.Commit(ctx))

	// Limits and misuse.
	tx = c.NewTxn()
	if _, err := tx.Range(ctx, []byte("t/"), nil, client.RangeOptions{}); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("range without a limit: %v", err)
	}
	for i := range 1024 {
		if err := tx.Put([]byte("w/"+strconv.Itoa(i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Put([]byte("w/x"), nil); !errors.Is(err, client.ErrTxnTooLarge) {
		t.Fatalf("write 1025: %v", err)
	}
	tx.Rollback()
}

// TestTxnPhantom: a range read followed by an insert into the range, by
// another writer, before the commit aborts it (phantom); and transactions
// that each count the keys under a prefix and insert one keep the count
// right under concurrency, which only range validation can do (none of
// them reads the count key).
func TestTxnPhantom(t *testing.T) {
	s, store := newTestServer(t)
	waitVersioned(t, s)
	c := newClient(t, store, "server")
	ctx := ctxT(t)
	p := []byte("p/")

	tx := c.NewTxn()
	if _, err := tx.Range(ctx, p, nil, client.RangeOptions{Prefix: true, Limit: 100}); err != nil {
		t.Fatal(err)
	}
	_ = tx.Put([]byte("count"), []byte("1"))
	if err := c.Put(ctx, []byte("p/intruder"), nil); err != nil {
		t.Fatal(err)
	}
	if cause := txnCause(t, tx.Commit(ctx)); cause != "phantom" {
		t.Fatalf("cause %q, want phantom", cause)
	}
	if err := c.Delete(ctx, []byte("p/intruder")); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	var attempts, commits atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				err := c.Txn(ctxT(t), func(ctx context.Context, tx *client.Txn) error {
					attempts.Add(1)
					kvs, err := tx.Range(ctx, p, nil, client.RangeOptions{Prefix: true, Limit: 1000})
					if err != nil {
						return err
					}
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
					if err := tx.Put(fmt.Appendf(nil, "p/%d-%d", g, i), nil); err != nil {
						return err
					}
					return tx.Put([]byte("count"), []byte(strconv.Itoa(len(kvs)+1)))
				})
				if err != nil {
					t.Error(err)
					return
				}
				commits.Add(1)
			}
		}()
	}
	wg.Wait()
	kvs, _, err := c.Range(ctx, p, nil, client.RangeOptions{Prefix: true})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := c.Get(ctx, []byte("count"))
	if string(got) != strconv.Itoa(len(kvs)) || len(kvs) != 60 {
		t.Fatalf("count %s, %d keys under the prefix (want 60)", got, len(kvs))
	}
	t.Logf("%d attempts for %d commits", attempts.Load(), commits.Load())
	if attempts.Load() == commits.Load() {
		t.Error("no transaction conflicted: the test did not test validation")
	}
}

// bank runs transfers between accounts in 4 goroutines and read-all
// transactions beside them, and returns the totals the read-alls saw, the
// final total, and the attempts and commits of the transfers.
func bank(t *testing.T, store regiontable.Store, skipValidation bool) (seen []int, final int, attempts, commits int64) {
	const accounts, start = 8, 100
	m, _ := locality.ParseMode("server")
	c, err := client.New(ctxT(t), client.Config{Store: store, Mode: m, Provider: "tcp", Logger: testLogger(t),
		TestingKnobs: client.TestingKnobs{TxnSkipValidation: skipValidation}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	acct := func(i int) []byte { return fmt.Appendf(nil, "acct/%02d", i) }
	for i := range accounts {
		if err := c.Put(ctx, acct(i), []byte(strconv.Itoa(start))); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func(ctx context.Context, tx *client.Txn) (int, error) {
		kvs, err := tx.Range(ctx, []byte("acct/"), nil, client.RangeOptions{Prefix: true, Limit: 100})
		if err != nil {
			return 0, err
		}
		sum := 0
		for _, kv := range kvs {
			n, _ := strconv.Atoi(string(kv.Value))
			sum += n
		}
		return sum, nil
	}
	var mu sync.Mutex
	var nAttempts, nCommits atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 40 {
				if i%5 == 4 {
					var sum int
					err := c.Txn(ctxT(t), func(ctx context.Context, tx *client.Txn) (err error) {
						sum, err = readAll(ctx, tx)
						return err
					})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					seen = append(seen, sum)
					mu.Unlock()
					continue
				}
				from, to := r.IntN(accounts), r.IntN(accounts-1)
				if to >= from {
					to++
				}
				amount := 1 + r.IntN(10)
				err := c.Txn(ctxT(t), func(ctx context.Context, tx *client.Txn) error {
					nAttempts.Add(1)
					a, err := tx.Get(ctx, acct(from))
					if err != nil {
						return err
					}
					b, err := tx.Get(ctx, acct(to))
					if err != nil {
						return err
					}
					time.Sleep(time.Duration(r.IntN(1000)) * time.Microsecond)
					na, _ := strconv.Atoi(string(a.Value))
					nb, _ := strconv.Atoi(string(b.Value))
					if err := tx.Put(acct(from), []byte(strconv.Itoa(na-amount))); err != nil {
						return err
					}
					return tx.Put(acct(to), []byte(strconv.Itoa(nb+amount)))
				})
				if err != nil {
					t.Error(err)
					return
				}
				nCommits.Add(1)
			}
		}()
	}
	wg.Wait()
	err = c.Txn(ctx, func(ctx context.Context, tx *client.Txn) (err error) {
		final, err = readAll(ctx, tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return seen, final, nAttempts.Load(), nCommits.Load()
}

// TestTxnBank: concurrent transfers keep the total, every read-all sees
// it, and some transfers conflicted; with the client's validation off
// (its commits carry no read set) the same workload loses updates, so
// the test can fail.
func TestTxnBank(t *testing.T) {
	s, store := newTestServer(t)
	waitVersioned(t, s)
	seen, final, attempts, commits := bank(t, store, false)
	for _, sum := range seen {
		if sum != 800 {
			t.Errorf("a read-all saw a total of %d, want 800 (all: %v)", sum, seen)
			break
		}
	}
	if final != 800 {
		t.Errorf("final total %d, want 800", final)
	}
	t.Logf("validated: %d attempts for %d transfers, %d read-alls", attempts, commits, len(seen))
	if attempts == commits {
		t.Error("no transfer conflicted: the test did not test validation")
	}

	t.Run("validation off", func(t *testing.T) {
		s, store := newTestServer(t)
		waitVersioned(t, s)
		seen, final, attempts, commits := bank(t, store, true)
		broken := final != 800
		for _, sum := range seen {
			broken = broken || sum != 800
		}
		t.Logf("unvalidated: %d attempts for %d transfers; final %d, read-alls %v", attempts, commits, final, seen)
		if !broken {
			t.Error("without validation the bank kept its total: the workload cannot catch lost updates")
		}
	})
}

// TestTxnSpansRegions: a transaction over keys of two regions fails
// with ErrTxnSpansRegions and applies nothing.
func TestTxnSpansRegions(t *testing.T) {
	srvs, store := startCluster(t, 2, func(i int, o *Options) { o.SplitPlacement = PlaceRemote })
	for _, s := range srvs {
		waitVersioned(t, s)
	}
	c := newClient(t, store, "server")
	key := func(i int) []byte { return fmt.Appendf(nil, "key%06d", i) }
	for i := 0; i < 4000; i++ {
		if err := c.Put(ctxT(t), key(i), []byte("value-of-some-length-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		if i%250 != 249 {
			continue
		}
		err := c.Txn(ctxT(t), func(ctx context.Context, tx *client.Txn) error {
			if _, err := tx.Get(ctx, key(0)); err != nil {
				return err
			}
			return tx.Put(key(i), []byte("txn"))
		})
		if err == nil {
			continue
		}
		if !errors.Is(err, client.ErrTxnSpansRegions) {
			t.Fatalf("after %d keys: %v", i+1, err)
		}
		if v, err := c.Get(ctxT(t), key(i)); err != nil || string(v) == "txn" {
			t.Fatalf("a refused transaction wrote: %q, %v", v, err)
		}
		// The server checks too: sent to the first key's server, the
		// request is refused TxnSpansRegions.
		conn := dial(t, srvs[0])
		req := &wire.TxnRequest{Reads: []wire.TxnRead{{Key: key(0), Version: 0}}, Writes: []wire.TxnWrite{{Op: wire.TxnPut, Key: key(i), Value: []byte("txn")}}}
		if _, err := call(t, conn, wire.OpTxn, req, &wire.TxnReply{}); wire.StatusOf(err) != wire.StatusTxnSpansRegions {
			t.Fatalf("a raw transaction over two regions: %v", err)
		}
		if v, err := c.Get(ctxT(t), key(i)); err != nil || string(v) == "txn" {
			t.Fatalf("a refused transaction wrote: %q, %v", v, err)
		}
		return
	}
	t.Fatal("4000 keys and no transaction spanned two regions")
}

// TestBadTxnRequests: malformed transactions are refused BadRequest, one
// with too large a value ValueTooLarge, one with an empty key EmptyKey,
// and one to a region without versions yet NotVersioned; nothing
// changes.
func TestBadTxnRequests(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.TestingKnobs.NoVersions = true })
	c := dial(t, s)
	put(t, c, "keep", "me")
	h := "0000000000000000 0000000000000000 0000000000000000 0000000000000000 "
	for _, tc := range []struct {
		name string
		req  wire.Message
		st   wire.Status
	}{
		{"unknown write op", rawBody(h + "00000000 00000000 01000000 07 04000000 6b656570 00000000"), wire.StatusBadRequest},
		{"no keys", &wire.TxnRequest{}, wire.StatusBadRequest},
		{"value too large", &wire.TxnRequest{Writes: []wire.TxnWrite{{Op: wire.TxnPut, Key: []byte("keep"), Value: make([]byte, wire.MaxValueSize+1)}}}, wire.StatusValueTooLarge},
		{"empty key", &wire.TxnRequest{Reads: []wire.TxnRead{{}}}, wire.StatusEmptyKey},
		{"no versions yet", &wire.TxnRequest{Writes: []wire.TxnWrite{{Op: wire.TxnDelete, Key: []byte("keep")}}}, wire.StatusNotVersioned},
	} {
		_, err := call(t, c, wire.OpTxn, tc.req, &wire.TxnReply{})
		if got := wire.StatusOf(err); got != tc.st {
			t.Errorf("%s: status %v (%v), want %v", tc.name, got, err, tc.st)
		}
	}
	if v, ok := get(t, c, "keep"); !ok || v != "me" {
		t.Fatalf("keep = %q, %v after bad transactions", v, ok)
	}
}

// TestTxnBoundsAgree: rsm's txn record mirrors wire's TxnRequest (rsm
// imports no wire type): the bounds, the write ops and the causes must
// stay equal.
func TestTxnBoundsAgree(t *testing.T) {
	if rsm.MaxTxnReads != wire.MaxTxnReads || rsm.MaxTxnRanges != wire.MaxTxnRanges || rsm.MaxTxnWrites != wire.MaxTxnWrites {
		t.Fatal("rsm's txn bounds differ from wire's")
	}
	if uint8(rsm.TxnPut) != uint8(wire.TxnPut) || uint8(rsm.TxnDelete) != uint8(wire.TxnDelete) ||
		rsm.TxnVersion != uint8(wire.TxnVersion) || rsm.TxnPhantom != uint8(wire.TxnPhantom) {
		t.Fatal("rsm's txn ops or causes differ from wire's")
	}
}
