package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/locality"
)

func TestCPUSlotsAcquire(t *testing.T) {
	s := NewCPUSlots(1)
	if s.Cap() != 1 || NewCPUSlots(0).Cap() != 1 {
		t.Fatalf("caps %d, %d: want 1, 1", s.Cap(), NewCPUSlots(0).Cap())
	}
	// No call waiting: no bound.
	for range 3 {
		if held, err := s.acquire(context.Background()); held || err != nil {
			t.Fatalf("acquire with no call waiting: held %v, %v", held, err)
		}
	}
	s.callStart()
	if held, err := s.acquire(context.Background()); !held || err != nil {
		t.Fatalf("acquire while a call waits: held %v, %v", held, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire of a taken slot: %v, want the context's deadline", err)
	}
	s.release(true)
	if held, err := s.acquire(context.Background()); !held || err != nil || s.InUse() != 1 {
		t.Fatalf("acquire after release: held %v, %v, %d in use", held, err, s.InUse())
	}
	s.release(true)
	s.callEnd()
	var none *CPUSlots
	none.callStart()
	if held, err := none.acquire(ctx); held || err != nil {
		t.Fatalf("nil slots: held %v, %v", held, err)
	}
	none.release(false)
	none.callEnd()
}

// TestCPUSlotsBoundClientSideWork: with Config.CPUSlots and a server-side
// call waiting, at most that many goroutines of all the clients sharing
// them read one-sided over shm at once (gets, and client-side range
// pages); with no call waiting, and over tcp, they are not bounded; every
// slot is free again when the operations end. A hook that sleeps in each
// node read makes the goroutines overlap, and the runs without slots show
// that they do.
func TestCPUSlotsBoundClientSideWork(t *testing.T) {
	rc := startReal(t, 1, nil)
	const keys, workers, slots = 200, 8, 2
	{
		c := mustClient(t, realConfig(t, rc))
		mustPut(t, c, keys)
	}
	run := func(provider string, s *CPUSlots, calling bool) int64 {
		if calling {
			// A call waiting for its reply all along (a put, say).
			s.callStart()
			defer s.callEnd()
		}
		var active, most atomic.Int64
		mk := func() *Client {
			cfg := realConfig(t, rc)
			cfg.Mode, cfg.Provider, cfg.CPUSlots = locality.Mode{Kind: locality.ClientOnly}, provider, s
			cfg.NodeCacheBytes, cfg.PathCacheEntries = -1, -1
			cfg.TestingKnobs.AfterNodeRead = func(uint64, []byte) {
				n := active.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(200 * time.Microsecond)
				active.Add(-1)
			}
			return mustClient(t, cfg)
		}
		clients := []*Client{mk(), mk()} // two clients, one set of slots
		ctx := testCtx(t, time.Minute)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				c := clients[w%2]
				for i := range 40 {
					k := (w*41 + i*7) % keys
					if i%10 == 9 {
						if _, _, err := c.Range(ctx, key(k), nil, RangeOptions{Limit: 20}); err != nil {
							t.Errorf("range from %s: %v", key(k), err)
							return
						}
						continue
					}
					if v, err := c.Get(ctx, key(k)); err != nil || string(v) != string(value(k, 0)) {
						t.Errorf("get %s = %q, %v", key(k), v, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if s != nil && s.InUse() != 0 {
			t.Errorf("%s: %d slots still taken after the operations", provider, s.InUse())
		}
		if st := clients[0].Stats(); st.ServerHops != 0 {
			t.Errorf("%s: %d server-side hops in client mode", provider, st.ServerHops)
		}
		return most.Load()
	}
	if got := run(ProviderSHM, nil, false); got <= slots {
		t.Fatalf("shm without slots: at most %d reads at once; the test needs more than %d to tell", got, slots)
	}
	if got := run(ProviderSHM, NewCPUSlots(slots), true); got > slots {
		t.Errorf("shm with %d slots, a call waiting: %d reads at once", slots, got)
	}
	if got := run(ProviderSHM, NewCPUSlots(slots), false); got <= slots {
		t.Errorf("shm with %d slots, no call waiting: at most %d reads at once; with no call to wait for there is no bound", slots, got)
	}
	if got := run(ProviderTCP, NewCPUSlots(slots), true); got <= slots {
		t.Errorf("tcp with %d slots, a call waiting: at most %d reads at once; tcp reads wait for replies and are not bounded", slots, got)
	}
}

// A client-side hop that waited for a CPU slot counts the wait in the
// read latency the selector learns (l_r), as a client-side range page's
// latency does: the selector weighs what a client-side hop costs while
// slots are short, not only its loads. The test holds the only slot
// while a call waits, so a client-side get waits for it.
func TestCPUSlotsWaitInHopCost(t *testing.T) {
	rc := startReal(t, 1, nil)
	mustPut(t, mustClient(t, realConfig(t, rc)), 20)
	const held = 40 * time.Millisecond
	get := func(s *CPUSlots, hold bool) locality.EstimateSnapshot {
		cfg := realConfig(t, rc)
		cfg.Mode, cfg.Provider, cfg.CPUSlots = locality.Mode{Kind: locality.ClientOnly}, ProviderSHM, s
		cfg.NodeCacheBytes, cfg.PathCacheEntries = -1, -1
		c := mustClient(t, cfg)
		ctx := testCtx(t, time.Minute)
		if _, err := c.Get(ctx, key(0)); err != nil { // topology and estimator
			t.Fatal(err)
		}
		if hold {
			s.callStart()
			defer s.callEnd()
			if ok, err := s.acquire(ctx); !ok || err != nil {
				t.Fatalf("take the slot: %v, %v", ok, err)
			}
			time.AfterFunc(held, func() { s.release(true) })
		}
		if v, err := c.Get(ctx, key(7)); err != nil || string(v) != string(value(7, 0)) {
			t.Fatalf("get %s = %q, %v", key(7), v, err)
		}
		st := c.Stats()
		if st.ServerHops != 0 || len(st.Selector.Servers) != 1 {
			t.Fatalf("%d server-side hops, %d estimators: want a client-side get on one server", st.ServerHops, len(st.Selector.Servers))
		}
		return st.Selector.Servers[0].LR
	}
	free := get(NewCPUSlots(1), false)
	waited := get(NewCPUSlots(1), true)
	// l_r's mean over its samples: one of them holds the wait.
	if min := held / time.Duration(waited.Samples); waited.Mean < min {
		t.Errorf("l_r after a hop that waited %v for its slot: mean %v over %d reads, want at least %v (free slots: %v)", held, waited.Mean, waited.Samples, min, free.Mean)
	}
	if free.Mean >= held/time.Duration(max(free.Samples, 1)) {
		t.Errorf("l_r with free slots: mean %v over %d reads: the test cannot tell", free.Mean, free.Samples)
	}
}
