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
	if err := s.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire of a taken slot: %v, want the context's deadline", err)
	}
	s.release()
	if err := s.acquire(context.Background()); err != nil || s.InUse() != 1 {
		t.Fatalf("acquire after release: %v, %d in use", err, s.InUse())
	}
	s.release()
	var none *CPUSlots
	if err := none.acquire(ctx); err != nil {
		t.Fatalf("nil slots: %v", err)
	}
	none.release()
}

// TestCPUSlotsBoundClientSideWork: with Config.CPUSlots, at most that many
// goroutines of all the clients sharing them read one-sided over shm at
// once (gets, and client-side range pages); reads over tcp are not
// bounded; every slot is free again when the operations end. A hook that
// sleeps in each node read makes the goroutines overlap, and the runs
// without slots show that they do.
func TestCPUSlotsBoundClientSideWork(t *testing.T) {
	rc := startReal(t, 1, nil)
	const keys, workers, slots = 200, 8, 2
	{
		c := mustClient(t, realConfig(t, rc))
		mustPut(t, c, keys)
	}
	run := func(provider string, s *CPUSlots) int64 {
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
	if got := run(ProviderSHM, nil); got <= slots {
		t.Fatalf("shm without slots: at most %d reads at once; the test needs more than %d to tell", got, slots)
	}
	if got := run(ProviderSHM, NewCPUSlots(slots)); got > slots {
		t.Errorf("shm with %d slots: %d reads at once", slots, got)
	}
	if got := run(ProviderTCP, NewCPUSlots(slots)); got <= slots {
		t.Errorf("tcp with %d slots: at most %d reads at once; tcp reads wait for replies and are not bounded", slots, got)
	}
}
