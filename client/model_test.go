package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// regModel checks reads of single-writer registers: every key is written
// by one writer only, so its writes are totally ordered. A read that
// started at rs and ended at re is linearizable iff it returned the value
// of a write w (or "absent" for a delete or the initial state) such that
// w started before re and no later write had been acknowledged before rs.
type regModel struct {
	mu   sync.Mutex
	keys map[string]*regHistory
}

type regHistory struct {
	writes []regWrite // in order; writes[0] is the initial state
}

type regWrite struct {
	value      []byte // nil: absent
	start, ack time.Time
	acked      bool
}

func newRegModel() *regModel { return &regModel{keys: make(map[string]*regHistory)} }

// initial records the initial value of key (nil: absent).
func (m *regModel) initial(key, value []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys[string(key)] = &regHistory{writes: []regWrite{{value: value, acked: true}}}
}

// begin records the start of a write and returns its index.
func (m *regModel) begin(key, value []byte, start time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.keys[string(key)]
	h.writes = append(h.writes, regWrite{value: value, start: start})
	return len(h.writes) - 1
}

// ack records that write i of key was acknowledged at t.
func (m *regModel) ack(key []byte, i int, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := &m.keys[string(key)].writes[i]
	w.ack, w.acked = t, true
}

// check judges a read of key over [rs, re] that returned value (nil:
// absent).
func (m *regModel) check(key, value []byte, rs, re time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.keys[string(key)]
	// The last write acknowledged before the read started.
	floor := 0
	for i, w := range h.writes {
		if w.acked && w.ack.Before(rs) {
			floor = i
		}
	}
	for i := len(h.writes) - 1; i >= floor; i-- {
		w := h.writes[i]
		if i > 0 && !w.start.Before(re) {
			continue
		}
		if (w.value == nil) == (value == nil) && bytes.Equal(w.value, value) {
			return nil
		}
	}
	return fmt.Errorf("read of %s = %q is not linearizable: floor write %d = %q, %d writes", key, value, floor, h.writes[floor].value, len(h.writes))
}

// final returns the last value of every key (writes all acknowledged).
func (m *regModel) final() map[string][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][]byte)
	for k, h := range m.keys {
		if v := h.writes[len(h.writes)-1].value; v != nil {
			out[k] = v
		}
	}
	return out
}

// runModel runs writers and readers against c for d and checks every read
// against the model. Writer w owns the keys i with i%writers == w.
func runModel(t *testing.T, c *Client, n, writers, readers int, d time.Duration, seed uint64) *regModel {
	t.Helper()
	m := newRegModel()
	ctx := testCtx(t, 60*time.Second)
	for i := range n {
		if i%3 == 2 {
			if err := c.Delete(ctx, key(i)); err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatalf("preload delete %s: %v", key(i), err)
			}
			m.initial(key(i), nil)
			continue
		}
		if err := c.Put(ctx, key(i), value(i, 0)); err != nil {
			t.Fatalf("preload %s: %v", key(i), err)
		}
		m.initial(key(i), value(i, 0))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, writers+readers)
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for v := 1; ; v++ {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(n/writers)*writers + w
				if i >= n {
					continue
				}
				k := key(i)
				var val []byte
				if rng.IntN(5) > 0 {
					val = value(i, v)
				}
				start := time.Now()
				idx := m.begin(k, val, start)
				var err error
				if val != nil {
					err = c.Put(ctx, k, val)
				} else if err = c.Delete(ctx, k); errors.Is(err, ErrNotFound) {
					err = nil
				}
				if err != nil {
					errc <- fmt.Errorf("write %s: %w", k, err)
					return
				}
				m.ack(k, idx, time.Now())
			}
		})
	}
	for r := range readers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(1000+r)))
			var dst []byte
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(n)
				k := key(i)
				rs := time.Now()
				var got []byte
				var err error
				if rng.IntN(8) == 0 {
					// A short scan: each key of the window was read at some
					// point of it, present with its value or absent.
					hi := min(i+8, n)
					var pairs []KV
					pairs, _, err = c.Range(ctx, key(i), key(hi), RangeOptions{})
					re := time.Now()
					if err == nil {
						if cerr := m.checkScan(i, hi, pairs, rs, re); cerr != nil {
							errc <- cerr
							return
						}
					}
				} else if rng.IntN(4) == 0 {
					var ok bool
					ok, err = c.Contains(ctx, k)
					re := time.Now()
					if err == nil {
						// Contains only tells presence: check it against
						// the presence of some linearizable value.
						if cerr := m.checkPresence(k, ok, rs, re); cerr != nil {
							errc <- cerr
							return
						}
					}
				} else {
					dst, err = c.GetAppend(ctx, dst[:0], k)
					re := time.Now()
					if err == nil {
						got = bytes.Clone(dst)
						if got == nil {
							got = []byte{}
						}
					}
					if err == nil || errors.Is(err, ErrNotFound) {
						if cerr := m.check(k, got, rs, re); cerr != nil {
							errc <- cerr
							return
						}
						err = nil
					}
				}
				if err != nil {
					errc <- fmt.Errorf("read %s: %w", k, err)
					return
				}
			}
		})
	}
	select {
	case <-time.After(d):
	case err := <-errc:
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	return m
}

// checkScan judges a scan of keys lo..hi-1 over [rs, re].
func (m *regModel) checkScan(lo, hi int, pairs []KV, rs, re time.Time) error {
	got := make(map[string][]byte)
	for j, kv := range pairs {
		if j > 0 && bytes.Compare(pairs[j-1].Key, kv.Key) >= 0 {
			return fmt.Errorf("scan out of order: %q then %q", pairs[j-1].Key, kv.Key)
		}
		got[string(kv.Key)] = kv.Value
	}
	if len(got) != len(pairs) {
		return fmt.Errorf("scan returned duplicate keys")
	}
	for i := lo; i < hi; i++ {
		k := key(i)
		v, ok := got[string(k)]
		if ok && v == nil {
			v = []byte{}
		}
		if err := m.check(k, v, rs, re); err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		delete(got, string(k))
	}
	if len(got) > 0 {
		return fmt.Errorf("scan returned keys outside its range: %d", len(got))
	}
	return nil
}

// checkPresence judges a Contains over [rs, re].
func (m *regModel) checkPresence(key []byte, present bool, rs, re time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.keys[string(key)]
	floor := 0
	for i, w := range h.writes {
		if w.acked && w.ack.Before(rs) {
			floor = i
		}
	}
	for i := len(h.writes) - 1; i >= floor; i-- {
		w := h.writes[i]
		if i > 0 && !w.start.Before(re) {
			continue
		}
		if (w.value != nil) == present {
			return nil
		}
	}
	return fmt.Errorf("contains %s = %v is not linearizable", key, present)
}

// checkFinal compares a full scan with the model's final state.
func checkFinal(t *testing.T, ctx context.Context, c *Client, m *regModel) {
	t.Helper()
	want := m.final()
	pairs, resume, err := c.Range(ctx, nil, nil, RangeOptions{})
	if err != nil || resume != nil {
		t.Fatalf("Range: %v (resume %q)", err, resume)
	}
	if len(pairs) != len(want) {
		t.Fatalf("Range returned %d pairs, model has %d", len(pairs), len(want))
	}
	for i, kv := range pairs {
		if i > 0 && bytes.Compare(pairs[i-1].Key, kv.Key) >= 0 {
			t.Fatalf("Range out of order at %d: %q then %q", i, pairs[i-1].Key, kv.Key)
		}
		if !bytes.Equal(want[string(kv.Key)], kv.Value) {
			t.Fatalf("Range: %s = %q, model %q", kv.Key, kv.Value, want[string(kv.Key)])
		}
	}
	for k, v := range want {
		got, err := c.Get(ctx, []byte(k))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("final Get %s = %q, %v; want %q", k, got, err, v)
		}
	}
}
