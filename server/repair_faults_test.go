package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// Self-repair under the faults that left a compose drill's cluster with a
// region of four replicas: a replacement whose new replica is slow to be
// added, and a leadership transfer that times out.

// "the coordinator replaces a dead server's replica in every region it is
// in and removes extra replicas": a dead server's replacement whose
// nonvoter takes longer to add than the coordinator's repair interval
// (BeforeAddNonvoter holds the host for three intervals). The coordinator
// asks the host again meanwhile, and by then the table lists the first
// target as a learner, so placement names another server: the host must
// keep the move it started, and no region may ever list more than one
// server beyond --replicas. Without that, both targets joined and the
// region kept four voters for good.
func TestSlowReplacementKeepsItsTarget(t *testing.T) {
	var mu sync.Mutex
	held := make(map[uint32]bool) // regions whose first addition was held
	hold := func(region uint32, server string) {
		mu.Lock()
		first := !held[region]
		held[region] = true
		mu.Unlock()
		if first {
			time.Sleep(3 * repairInterval)
		}
	}
	srvs, store := startReplicated(t, 5, 3, func(i int, o *Options) {
		o.DeadAfter = 2 * time.Second
		o.BalanceInterval = -1
		o.TestingKnobs.BeforeAddNonvoter = hold
	})
	ctx := repairCtx(t)
	c := newClient(t, store, "server")
	keys := putRange(t, c, 0, 200)
	slices.Sort(keys)
	mu.Lock()
	clear(held) // the start's additions are not the subject
	mu.Unlock()

	victim := followingServer(t, srvs)
	id := victim.opts.ServerID
	if err := victim.Close(); err != nil {
		t.Fatal(err)
	}
	widest := make(map[uint32]int) // the most servers each region listed
	rs := waitRegions(t, ctx, store, "replicas moved off "+id, func(rs []regiontable.Region) bool {
		for _, r := range rs {
			widest[r.ID] = max(widest[r.ID], len(r.Replicas)+len(r.Learners))
		}
		return fullyReplicatedWithout(3, id)(rs)
	})
	mu.Lock()
	n := len(held)
	mu.Unlock()
	if n == 0 {
		t.Fatal("no replacement was held: the test did not exercise a slow addition")
	}
	for rid, w := range widest {
		if w > 4 {
			t.Errorf("region %d listed %d servers during the replacement, want at most 4 (--replicas 3, one being replaced)", rid, w)
		}
	}
	t.Logf("%d replacements held; after: %s", n, placement(rs))
	mustReadAll(t, "after the repair", map[string]*client.Client{"server": c}, keys)
}

// "re-tries a move or transfer that timed out": raft gives a leadership
// transfer one election timeout, which a loaded leader can run out of.
// The host's first try times out (TransferFault); the one request an
// operator or the coordinator sends still ends with the target leading.
func TestTransferTimeoutRetried(t *testing.T) {
	var tries sync.Map // region → tries seen
	srvs, store := startReplicated(t, 3, 3, func(i int, o *Options) {
		o.BalanceInterval = -1
		o.TestingKnobs.TransferFault = func(region uint32, attempt int) error {
			tries.Store(region, attempt)
			if attempt == 1 {
				return errors.New("leadership transfer timeout")
			}
			return nil
		}
	})
	ctx := repairCtx(t)
	c := newClient(t, store, "server")
	keys := putRange(t, c, 0, 100)
	slices.Sort(keys)

	r, err := store.Region(ctx, srvs[0].reps.own.regionID)
	if err != nil {
		t.Fatal(err)
	}
	var to string
	for _, id := range r.Replicas {
		if id != r.Host {
			to = id
			break
		}
	}
	host := serverByID(srvs, r.Host)
	if _, err := call(t, dial(t, host), wire.OpTransferLeader, &wire.TransferLeaderRequest{Region: r.ID, To: to}, &wire.EmptyMessage{}); err != nil {
		t.Fatalf("transfer region %d from %s to %s, whose first try timed out: %v", r.ID, r.Host, to, err)
	}
	if n, _ := tries.Load(r.ID); n != 2 {
		t.Errorf("transfer tries: %v, want 2 (one timed out)", n)
	}
	waitRegions(t, ctx, store, "region hosted by "+to, func(rs []regiontable.Region) bool {
		for _, e := range rs {
			if e.ID == r.ID {
				return e.Host == to
			}
		}
		return false
	})
	keys = append(keys, putRange(t, c, 100, 150)...)
	slices.Sort(keys)
	mustReadAll(t, "after the transfer", map[string]*client.Client{"server": c}, keys)
}

// "A region's surviving voters elect and take over whatever the region
// holds (empty or not, made just now or long ago)": a server replaced
// while it was down returns with a new, empty region, which gains
// followers; then it dies again. The followers elect a leader, it takes
// the region over, and the coordinator replaces the dead server in it.
func TestReturnedServersNewRegionTakenOver(t *testing.T) {
	srvs, store := startReplicated(t, 4, 3, func(i int, o *Options) {
		o.DeadAfter = 2 * time.Second
		o.BalanceInterval = -1
	})
	ctx := repairCtx(t)
	c := newClient(t, store, "server")
	keys := putRange(t, c, 0, 200)
	slices.Sort(keys)

	victim := followingServer(t, srvs)
	id, old := victim.opts.ServerID, victim.reps.own.regionID
	opts := restartOptions(victim)
	if err := victim.Close(); err != nil {
		t.Fatal(err)
	}
	waitRegions(t, ctx, store, "replicas moved off "+id, fullyReplicatedWithout(3, id))

	back := restartServer(t, opts)
	if back.reps.own.regionID == old {
		t.Fatalf("%s kept region %d, whose group replaced it", id, old)
	}
	fresh := back.reps.own.regionID
	waitRegions(t, ctx, store, "the returned server's new region replicated", fullyReplicatedWithout(3))
	back.crashForTest(t)

	e := waitRegions(t, ctx, store, "region "+id+"'s new region taken over", func(rs []regiontable.Region) bool {
		for _, r := range rs {
			if r.ID == fresh {
				return r.Host != id
			}
		}
		return false
	})
	t.Logf("after the second death: %s", placement(e))
	waitRegions(t, ctx, store, "replicas moved off "+id+" again", fullyReplicatedWithout(3, id))
	mustReadAll(t, "after the second death", map[string]*client.Client{"server": c}, keys)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Put(cctx, []byte("after"), []byte("both deaths")); err != nil {
		t.Fatal(err)
	}
}
