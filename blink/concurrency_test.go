package blink

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrent runs one writer doing random inserts, updates and deletes
// against readers doing Get, Contains and bounded iteration in both
// directions, all lock-free (doc.go: "One writer per meganode at a time, any
// number of lock-free readers"), and checks every answer a reader gets:
//
//   - paper §2.4: "any search through a Cell store for x, if it terminates,
//     will terminate in the correct place", and Theorem 1: "all
//     previously-inserted data that has not yet been deleted can be reached
//     via a valid traversal". A stable key (inserted before the readers
//     start, never deleted or changed) is always found with its value, by
//     Get, Contains, SeekGE and every iteration whose range covers it.
//   - Linearizability of point reads (§2.4: "Cell dictionary operations
//     (search, insert, and delete) are linearizable"): for a churned key the
//     writer publishes a sequence number when each operation starts and
//     when it completes. A Get or Contains must return the state left by
//     the last operation completed before the read began, or by an
//     operation started before the read ended.
//   - §2.3: "the client checks if the CRC of the data matches the CRC in the
//     pointer; if not, the RDMA is retried": a value read is always one the
//     writer wrote for that key (values encode key and sequence number, and
//     records are reused as soon as they are freed), never a torn or
//     reused record. Iter.Value checks the CRC; Get checks instead that
//     the leaf's version did not change while it copied the record.
//   - Iterators return strictly increasing (decreasing in reverse) keys
//     within their bounds (§2.2: "Range queries are implemented by
//     following right links at the leaf level").
func TestConcurrent(t *testing.T) {
	const (
		groups     = 16
		perGroup   = 200 // keys per group: ~1/3 stable, the rest churned
		readers    = 4
		minReads   = 200 // each reader does at least this many operations
		iterLimit  = 120
		checkEvery = 64 // reader ops between Stats reads
		hot        = 16 // churned keys that get half of the writes and reads
	)
	writerOps := 40_000
	if testing.Short() {
		writerOps = 5_000
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, writer ops %d, %d readers", seed, writerOps, readers)
	r := rand.New(rand.NewPCG(seed, 1))

	tr, _ := newTestTree(t, testTreeOpts{nodeSize: 512, meganodeSize: 16 << 20, extentBytes: 64 << 20})

	// Keys: 16-byte keys in groups sharing a prefix, stable and churned
	// ones interleaved so that churn splits the leaves around stable keys.
	// The first `hot` churned keys get half of the writes and of the
	// churned Gets, so reads often race with writes of the same key and
	// freed records are reused at once.
	seen := map[string]bool{}
	var stable, churn []string
	for g := 0; g < groups; g++ {
		for len(seen) < (g+1)*perGroup {
			k := fmt.Sprintf("g%02d/%012x", g, r.Uint64()&(1<<48-1))
			if seen[k] {
				continue
			}
			seen[k] = true
			if r.IntN(3) == 0 {
				stable = append(stable, k)
			} else {
				churn = append(churn, k)
			}
		}
	}
	sort.Strings(stable)
	churnIdx := make(map[string]int, len(churn))
	for i, k := range churn {
		churnIdx[k] = i
	}
	allKeys := append(append([]string{}, stable...), churn...)

	for _, k := range stable {
		mustPut(t, tr, k, string(concValue(k, 0)))
	}
	h := newHistory(len(churn), writerOps+len(churn))
	// Half of the churned keys exist before the readers start.
	for i := range churn {
		if r.IntN(2) == 0 {
			if err := h.apply(tr, churn, i, false); err != nil {
				t.Fatal(err)
			}
		}
	}

	var (
		writerDone atomic.Bool
		failed     atomic.Bool
		ready      sync.WaitGroup
		wg         sync.WaitGroup
		readerOps  [readers]int
	)
	fail := func(format string, args ...any) {
		if failed.CompareAndSwap(false, true) {
			t.Errorf("seed %d: "+format, append([]any{seed}, args...)...)
		}
	}

	for id := 0; id < readers; id++ {
		ready.Add(1)
		wg.Add(1)
		rr := rand.New(rand.NewPCG(seed, uint64(id)+100))
		go func() {
			defer wg.Done()
			ready.Done()
			var buf []byte
			var retries uint64
			it := tr.NewIter(nil)
			for i := 0; (i < minReads || !writerDone.Load()) && !failed.Load(); i++ {
				readerOps[id]++
				if i%checkEvery == 0 {
					// Stats are atomic counters, readable while
					// readers update them, and only grow.
					n := tr.Stats.Torn.Load() + tr.Stats.Invalid.Load() + tr.Stats.OutOfRange.Load() +
						tr.Stats.CRC.Load() + tr.Stats.Restarts.Load()
					if n < retries {
						fail("Stats went down from %d to %d retries", retries, n)
					}
					retries = n
				}
				switch x := rr.IntN(100); {
				case x < 40:
					var k string
					switch y := rr.IntN(6); {
					case y == 0:
						k = stable[rr.IntN(len(stable))]
					case y < 4:
						k = churn[rr.IntN(hot)]
					default:
						k = churn[rr.IntN(len(churn))]
					}
					if err := h.checkGet(tr, k, churnIdx, &buf); err != nil {
						fail("%v", err)
					}
				case x < 55:
					k := allKeys[rr.IntN(len(allKeys))]
					if err := h.checkContains(tr, k, churnIdx); err != nil {
						fail("%v", err)
					}
				case x < 65:
					if err := checkSeekStable(tr, it, stable, rr.IntN(len(stable))); err != nil {
						fail("%v", err)
					}
				default:
					var lo, hi []byte
					if rr.IntN(3) > 0 {
						lo = []byte(allKeys[rr.IntN(len(allKeys))])
					}
					if rr.IntN(3) > 0 {
						hi = []byte(allKeys[rr.IntN(len(allKeys))])
					}
					limit := 1 + rr.IntN(iterLimit)
					if rr.IntN(20) == 0 {
						limit = 0 // the whole range
					}
					if err := h.checkIter(tr, lo, hi, limit, rr.IntN(2) == 0, stable, churnIdx); err != nil {
						fail("%v", err)
					}
				}
			}
		}()
	}

	// The writer starts once every reader runs.
	ready.Wait()
	wr := rand.New(rand.NewPCG(seed, 2))
	for op := 0; op < writerOps && !failed.Load(); op++ {
		i := wr.IntN(len(churn))
		if wr.IntN(2) == 0 {
			i = wr.IntN(hot)
		}
		del := h.present[i] && wr.IntN(2) == 0
		if err := h.apply(tr, churn, i, del); err != nil {
			fail("writer: %v", err)
		}
	}
	writerDone.Store(true)
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("reader ops %v; retries: torn %d, invalid %d, out of range %d, crc %d, restarts %d; height %d",
		readerOps, tr.Stats.Torn.Load(), tr.Stats.Invalid.Load(), tr.Stats.OutOfRange.Load(),
		tr.Stats.CRC.Load(), tr.Stats.Restarts.Load(), tr.height())

	// At rest the tree holds exactly what the writer left.
	mustCheck(t, tr)
	want := len(stable)
	for i, k := range churn {
		got, err := tr.Get([]byte(k), nil)
		switch {
		case h.present[i]:
			want++
			if err != nil || !bytes.Equal(got, concValue(k, h.started[i].Load())) {
				t.Fatalf("at rest: Get(%q) = %q, %v; want sequence %d", k, got, err, h.started[i].Load())
			}
		case !errors.Is(err, ErrNotFound):
			t.Fatalf("at rest: Get(%q) of a deleted key = %q, %v", k, got, err)
		}
	}
	n := 0
	it := tr.NewIter(nil)
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if n != want || it.Error() != nil {
		t.Fatalf("at rest: iterated %d keys, want %d; %v", n, want, it.Error())
	}
}

// concValue is the value written for key at sequence number seq (0 for
// stable keys): "key#seq#" padded to one of a few lengths, so that records
// of equal size are freed and reused all the time.
func concValue(key string, seq uint64) []byte {
	sizes := [...]int{24, 24, 48, 48, 96, 200, 300, 2048}
	v := []byte(key + "#" + strconv.FormatUint(seq, 10) + "#")
	n := max(sizes[(seq*0x9e3779b97f4a7c15)>>61], len(v))
	for len(v) < n {
		v = append(v, 'a'+byte(seq%26))
	}
	return v
}

// parseConcValue returns the sequence number in a value and whether the
// value is exactly what the writer writes for key at that sequence number.
func parseConcValue(key string, v []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(v, []byte(key+"#"))
	if !ok {
		return 0, false
	}
	i := bytes.IndexByte(rest, '#')
	if i < 0 {
		return 0, false
	}
	seq, err := strconv.ParseUint(string(rest[:i]), 10, 64)
	if err != nil {
		return 0, false
	}
	return seq, bytes.Equal(v, concValue(key, seq))
}

// history records the writer's operations on churned keys. ops[s] is
// written once, before started[key] is set to s, so a reader that loaded
// started[key] >= s may read ops[s] (and every ops entry up to it).
type history struct {
	ops     []histOp
	started []atomic.Uint64 // per key: sequence of the last operation started
	done    []atomic.Uint64 // per key: sequence of the last operation completed
	present []bool          // writer only
	seq     uint64          // writer only
}

type histOp struct {
	key  int
	del  bool
	prev uint64 // previous operation on the same key, 0 if none
}

func newHistory(keys, ops int) *history {
	return &history{
		ops:     make([]histOp, ops+1),
		started: make([]atomic.Uint64, keys),
		done:    make([]atomic.Uint64, keys),
		present: make([]bool, keys),
	}
}

// apply runs one writer operation on churned key i and records it.
func (h *history) apply(tr *Tree, keys []string, i int, del bool) error {
	h.seq++
	s := h.seq
	h.ops[s] = histOp{key: i, del: del, prev: h.started[i].Load()}
	h.started[i].Store(s)
	k := []byte(keys[i])
	if del {
		ok, err := tr.Delete(k)
		if !ok || err != nil {
			return fmt.Errorf("Delete(%q) = %v, %v", k, ok, err)
		}
	} else if err := tr.Put(k, concValue(keys[i], s)); err != nil {
		return fmt.Errorf("Put(%q): %w", k, err)
	}
	h.done[i].Store(s)
	h.present[i] = !del
	return nil
}

// windowAllows reports whether a read of key i that began after operation
// `before` completed and ended before any operation after `after` started
// may have seen the key present (with value from operation seq) or absent.
func (h *history) windowAllows(i int, before, after uint64, found bool, seq uint64) bool {
	if found {
		// The put that wrote the value is `before` itself or started
		// later, and started before the read ended.
		return seq > 0 && seq >= before && seq <= after && h.ops[seq].key == i && !h.ops[seq].del
	}
	if before == 0 || h.ops[before].del {
		return true
	}
	for s := after; s > before; s = h.ops[s].prev {
		if h.ops[s].del {
			return true
		}
	}
	return false
}

func (h *history) checkGet(tr *Tree, k string, churnIdx map[string]int, buf *[]byte) error {
	i, churned := churnIdx[k]
	var before uint64
	if churned {
		before = h.done[i].Load()
	}
	v, err := tr.Get([]byte(k), (*buf)[:0])
	if err == nil {
		*buf = v
	}
	if !churned {
		if err != nil || !bytes.Equal(v, concValue(k, 0)) {
			return fmt.Errorf("Get(%q) of a stable key = %q, %v", k, v, err)
		}
		return nil
	}
	after := h.started[i].Load()
	switch {
	case err == nil:
		seq, ok := parseConcValue(k, v)
		if !ok {
			return fmt.Errorf("Get(%q) = %q: not a value written for this key", k, v)
		}
		if !h.windowAllows(i, before, after, true, seq) {
			return fmt.Errorf("Get(%q) = value of operation %d, outside the read's window (%d, %d]", k, seq, before, after)
		}
	case errors.Is(err, ErrNotFound):
		if !h.windowAllows(i, before, after, false, 0) {
			return fmt.Errorf("Get(%q) = not found, but the key was present throughout (operations %d..%d)", k, before, after)
		}
	default:
		return fmt.Errorf("Get(%q): %v", k, err)
	}
	return nil
}

func (h *history) checkContains(tr *Tree, k string, churnIdx map[string]int) error {
	i, churned := churnIdx[k]
	var before uint64
	if churned {
		before = h.done[i].Load()
	}
	ok, err := tr.Contains([]byte(k))
	if err != nil {
		return fmt.Errorf("Contains(%q): %v", k, err)
	}
	if !churned {
		if !ok {
			return fmt.Errorf("Contains(%q) of a stable key = false", k)
		}
		return nil
	}
	after := h.started[i].Load()
	if ok {
		// Some put in the window, or `before` itself, left it present.
		for s := after; s >= before && s > 0; s = h.ops[s].prev {
			if !h.ops[s].del {
				return nil
			}
		}
		return fmt.Errorf("Contains(%q) = true, but the key was absent throughout (operations %d..%d)", k, before, after)
	}
	if !h.windowAllows(i, before, after, false, 0) {
		return fmt.Errorf("Contains(%q) = false, but the key was present throughout (operations %d..%d)", k, before, after)
	}
	return nil
}

// checkSeekStable: SeekGE(stable key) lands on it, Next moves past it but
// not past the next stable key; SeekLT(stable key) lands below it but not
// below the previous stable key.
func checkSeekStable(tr *Tree, it *Iter, stable []string, j int) error {
	s := []byte(stable[j])
	if !it.SeekGE(s) || !bytes.Equal(it.Key(), s) {
		return fmt.Errorf("SeekGE(%q) of a stable key: valid %v key %q, %v", s, it.Valid(), it.Key(), it.Error())
	}
	ok := it.Next()
	switch {
	case ok && bytes.Compare(it.Key(), s) <= 0:
		return fmt.Errorf("SeekGE(%q), Next = %q: not increasing", s, it.Key())
	case j+1 < len(stable) && (!ok || bytes.Compare(it.Key(), []byte(stable[j+1])) > 0):
		return fmt.Errorf("SeekGE(%q), Next = %v %q: skipped stable key %q (%v)", s, ok, it.Key(), stable[j+1], it.Error())
	}
	ok = it.SeekLT(s)
	switch {
	case ok && bytes.Compare(it.Key(), s) >= 0:
		return fmt.Errorf("SeekLT(%q) = %q", s, it.Key())
	case j > 0 && (!ok || bytes.Compare(it.Key(), []byte(stable[j-1])) < 0):
		return fmt.Errorf("SeekLT(%q) = %v %q: skipped stable key %q (%v)", s, ok, it.Key(), stable[j-1], it.Error())
	}
	return it.Error()
}

// checkIter iterates [lo, hi) forward or in reverse, up to limit keys (0:
// all), and checks order, bounds, values, and that every stable key in the
// part of the range it covered was returned.
func (h *history) checkIter(tr *Tree, lo, hi []byte, limit int, reverse bool, stable []string, churnIdx map[string]int) error {
	it := tr.NewIter(&IterOptions{Lower: lo, Upper: hi})
	var got []string
	var ok bool
	if reverse {
		ok = it.Last()
	} else {
		ok = it.First()
	}
	for ; ok && (limit == 0 || len(got) < limit); ok = step(it, reverse) {
		k := string(it.Key())
		if lo != nil && k < string(lo) || hi != nil && k >= string(hi) {
			return fmt.Errorf("Iter[%q, %q) reverse %v returned %q out of bounds", lo, hi, reverse, k)
		}
		if n := len(got); n > 0 && (!reverse && k <= got[n-1] || reverse && k >= got[n-1]) {
			return fmt.Errorf("Iter[%q, %q) reverse %v returned %q after %q", lo, hi, reverse, k, got[n-1])
		}
		got = append(got, k)
		if len(got)%8 == 1 {
			if err := h.checkIterValue(it, k, churnIdx); err != nil {
				return err
			}
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("Iter[%q, %q) reverse %v: %v", lo, hi, reverse, err)
	}
	// The covered range: from the start bound to the last key returned,
	// or to the other bound if the iteration ran to its end.
	from, to := string(lo), string(hi) // [from, to), "" to means +inf
	exhausted := !ok
	if reverse {
		slices.Reverse(got)
		if !exhausted && len(got) > 0 {
			from = got[0]
		}
	} else if !exhausted && len(got) > 0 {
		to = got[len(got)-1] + "\x00"
	}
	if !exhausted && len(got) == 0 {
		return nil // limit 0 keys: covered nothing
	}
	j := sort.SearchStrings(stable, from)
	g := 0
	for ; j < len(stable) && (to == "" || stable[j] < to); j++ {
		for g < len(got) && got[g] < stable[j] {
			g++
		}
		if g == len(got) || got[g] != stable[j] {
			return fmt.Errorf("Iter[%q, %q) reverse %v limit %d (%d keys, exhausted %v) missed stable key %q",
				lo, hi, reverse, limit, len(got), exhausted, stable[j])
		}
	}
	return nil
}

// checkIterValue checks Iter.Value: a value the writer wrote for the key
// (or ErrNotFound if a churned key was deleted after the leaf was copied).
func (h *history) checkIterValue(it *Iter, k string, churnIdx map[string]int) error {
	v, err := it.Value()
	i, churned := churnIdx[k]
	if !churned {
		if err != nil || !bytes.Equal(v, concValue(k, 0)) {
			return fmt.Errorf("Iter.Value at stable key %q = %q, %v", k, v, err)
		}
		return nil
	}
	after := h.started[i].Load()
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return fmt.Errorf("Iter.Value at %q: %v", k, err)
	default:
		seq, ok := parseConcValue(k, v)
		if !ok || seq > after || h.ops[seq].key != i || h.ops[seq].del {
			return fmt.Errorf("Iter.Value at %q = %q: not a value written for this key (last op started %d)", k, v, after)
		}
	}
	return nil
}

func step(it *Iter, reverse bool) bool {
	if reverse {
		return it.Prev()
	}
	return it.Next()
}
