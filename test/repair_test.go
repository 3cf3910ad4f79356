package test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/regiontable"
)

// regionsUntil polls the region table until cond holds for its regions.
func regionsUntil(t *testing.T, store regiontable.Store, timeout time.Duration, what string, cond func([]regiontable.Region) bool) []regiontable.Region {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last []regiontable.Region
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rs, err := store.Regions(ctx)
		cancel()
		if err == nil {
			last = rs
			if cond(rs) {
				return rs
			}
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, r := range last {
				fmt.Fprintf(&b, "[%d host %s voters %v learners %v] ", r.ID, r.Host, r.Replicas, r.Learners)
			}
			t.Fatalf("%s: not within %v: %s", what, timeout, b.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func holdsAny(r regiontable.Region, id string) bool {
	return r.Host == id || slices.Contains(r.Replicas, id) || slices.Contains(r.Learners, id)
}

// The operator's commands and self-repair, on real processes: cellctl
// move-replica, transfer-leader and drain, then a server killed with
// SIGKILL and replaced after --dead-after: "when a server has been gone
// longer than --dead-after, each region with a replica there gets a new
// one on the live server with the fewest replicas ... and the region
// table follows". Every acknowledged key is read back after each step.
func TestCellctlMovesAndRepair(t *testing.T) {
	cl := startCluster(t, 4, serverOptions{cores: 1, regionSize: "32MiB", meganodeSize: "1MiB",
		flags: []string{"--replicas", "3", "--raft-heartbeat-timeout", "300ms", "--dead-after", "3s", "--balance-interval", "0"}})
	store := cl.table
	rs := waitReplicated(t, store, 3)
	c := cl.newClient(t, nil)
	var keys []string
	putKeys := func(from, to int) {
		for i := from; i < to; i++ {
			k := fmt.Sprintf("repair%05d", i)
			mustPut(t, c, k, "v"+k)
			keys = append(keys, k)
		}
	}
	readAll := func(step string) {
		t.Helper()
		for _, k := range keys {
			mustGet(t, c, k, "v"+k)
		}
		t.Logf("%s: all %d keys read back", step, len(keys))
	}
	putKeys(0, 300)
	ctl := cl.servers[0]

	// move-replica: a region's non-host replica to the server without one.
	r := rs[0]
	var from, to string
	for _, s := range cl.servers {
		switch {
		case !holdsAny(r, s.id):
			to = s.id
		case s.id != r.Host && from == "":
			from = s.id
		}
	}
	code, out, errOut := ctl.cellctl(t, "--command-timeout", "60s", "move-replica", fmt.Sprint(r.ID), from, to)
	if code != 0 {
		t.Fatalf("move-replica: exit %d: %s%s", code, out, errOut)
	}
	t.Logf("cellctl move-replica: %s", strings.TrimSpace(out))
	e, err := store.Region(context.Background(), r.ID)
	if err != nil || holdsAny(e, from) || !slices.Contains(e.Replicas, to) {
		t.Fatalf("after move-replica %s -> %s: %+v (%v)", from, to, e, err)
	}
	if code, out, errOut := ctl.cellctl(t, "move-replica", fmt.Sprint(r.ID), to, "no-such-server"); code == 0 || !strings.Contains(errOut, "not a live member") {
		t.Errorf("move-replica to a server that is not a member: exit %d: %s%s", code, out, errOut)
	}

	// transfer-leader: to the replica just added.
	code, out, errOut = ctl.cellctl(t, "transfer-leader", fmt.Sprint(r.ID), to)
	if code != 0 {
		t.Fatalf("transfer-leader: exit %d: %s%s", code, out, errOut)
	}
	t.Logf("cellctl transfer-leader: %s", strings.TrimSpace(out))
	if e, err := store.Region(context.Background(), r.ID); err != nil || e.Host != to {
		t.Fatalf("after transfer-leader to %s: %+v (%v)", to, e, err)
	}
	putKeys(300, 400)
	readAll("after move-replica and transfer-leader")

	// drain: everything leaves a server; members says so; --undo clears it.
	drained := cl.servers[1].id
	code, out, errOut = ctl.cellctl(t, "--command-timeout", "90s", "drain", drained)
	if code != 0 {
		t.Fatalf("drain: exit %d: %s%s", code, out, errOut)
	}
	t.Logf("cellctl drain: %s", strings.TrimSpace(out))
	regionsUntil(t, store, time.Second, "nothing on "+drained, func(rs []regiontable.Region) bool {
		for _, r := range rs {
			if holdsAny(r, drained) {
				return false
			}
		}
		return true
	})
	if _, out, _ := ctl.cellctl(t, "members"); !strings.Contains(out, "yes") {
		t.Errorf("members does not show the draining server:\n%s", out)
	}
	if code, out, errOut := ctl.cellctl(t, "drain", "--undo", drained); code != 0 {
		t.Fatalf("drain --undo: exit %d: %s%s", code, out, errOut)
	}
	readAll("after the drain")

	// A server killed: its replicas are replaced after --dead-after.
	var victim *cellServer
	for _, s := range cl.servers {
		if s.id != drained && s != ctl {
			victim = s
			break
		}
	}
	victim.kill()
	killed := time.Now()
	if _, out, _ := ctl.cellctl(t, "regions"); !strings.Contains(out, victim.id+"!") {
		t.Logf("regions right after the kill (the victim's member entry may outlive it for its lease):\n%s", out)
	}
	// While it is counted, the coordinator's count is in the table
	// (docs/durability.md, "The count outlives the coordinator").
	marked := time.Duration(-1)
	regionsUntil(t, store, 90*time.Second, "replicas moved off the killed "+victim.id, func(rs []regiontable.Region) bool {
		if st, err := store.Load(context.Background()); err == nil {
			if d, ok := st.Missing[victim.id]; ok {
				marked = max(marked, d)
			}
		}
		for _, r := range rs {
			if holdsAny(r, victim.id) || len(r.Replicas) != 3 || len(r.Learners) > 0 {
				return false
			}
		}
		return true
	})
	t.Logf("the killed server's replicas were replaced %v after SIGKILL (--dead-after 3s, membership lease 5s)", time.Since(killed).Round(100*time.Millisecond))
	if marked < 0 {
		t.Errorf("the table never marked the killed %s missing", victim.id)
	}
	// Replaced, it is listed by no region: its mark goes.
	for deadline := time.Now().Add(30 * time.Second); ; {
		st, err := store.Load(context.Background())
		if _, ok := st.Missing[victim.id]; err == nil && !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replaced %s is still marked missing (%v)", victim.id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("marked missing for up to %v, the mark cleared once replaced", marked.Round(time.Millisecond))
	putKeys(400, 450)
	readAll("after the repair")
	if code, out, errOut := ctl.cellctl(t, "check"); code != 0 {
		t.Errorf("check after the repair: exit %d: %s%s", code, out, errOut)
	}
}
