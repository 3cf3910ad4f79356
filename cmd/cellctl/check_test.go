package main

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// fakeReplicas answers OpReplicaHash for compareReplicas: servers (by
// address) holding region 1 at one applied index, with a hash each.
type fakeReplicas struct {
	mu   sync.Mutex
	hash map[string]uint64 // by address; absent: no replica
}

func (f *fakeReplicas) ask(_ context.Context, addr string, id uint32) (wire.ReplicaHashReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.hash[addr]
	if !ok || id != 1 {
		return wire.ReplicaHashReply{}, wire.StatusUnknownRegion.Err()
	}
	return wire.ReplicaHashReply{Applied: 7, Hash: [32]byte{byte(h)}, Pages: 3}, nil
}

func members(ids ...string) []regiontable.Member {
	var ms []regiontable.Member
	for _, id := range ids {
		ms = append(ms, regiontable.Member{ID: id, RPCAddr: id + ":7070"})
	}
	return ms
}

func TestCompareReplicas(t *testing.T) {
	ctx := context.Background()
	all := members("a", "b", "c", "d")
	region := func(voters []string, learners ...string) regiontable.Region {
		return regiontable.Region{ID: 1, Host: voters[0], Replicas: voters, Learners: learners}
	}
	fixed := func(r regiontable.Region) func(context.Context) (regiontable.State, error) {
		return func(context.Context) (regiontable.State, error) {
			return regiontable.State{Members: all, Regions: []regiontable.Region{r}}, nil
		}
	}
	for _, tc := range []struct {
		name      string
		listed    regiontable.Region // the table the check started from
		now       regiontable.Region // the table when it asks again
		hashes    map[string]uint64
		compared  bool
		violation string
		note      string
	}{
		{name: "equal", listed: region([]string{"a", "b", "c"}), now: region([]string{"a", "b", "c"}),
			hashes: map[string]uint64{"a:7070": 5, "b:7070": 5, "c:7070": 5}, compared: true},
		{name: "differ", listed: region([]string{"a", "b", "c"}), now: region([]string{"a", "b", "c"}),
			hashes: map[string]uint64{"a:7070": 5, "b:7070": 5, "c:7070": 6}, compared: true,
			violation: "the replica on c differs from the one on a"},
		// c was replaced by d after the check read the table, and dropped
		// its replica: not a violation; the replicas of now are compared.
		{name: "moved while checked", listed: region([]string{"a", "b", "c"}), now: region([]string{"a", "b", "d"}),
			hashes: map[string]uint64{"a:7070": 5, "b:7070": 5, "d:7070": 5}, compared: true},
		{name: "listed voter without replica", listed: region([]string{"a", "b", "c"}), now: region([]string{"a", "b", "c"}),
			hashes: map[string]uint64{"a:7070": 5, "b:7070": 5}, violation: "replica on c: the server holds no replica of it"},
		{name: "learner not open yet", listed: region([]string{"a", "b", "c"}, "d"), now: region([]string{"a", "b", "c"}, "d"),
			hashes: map[string]uint64{"a:7070": 5, "b:7070": 5, "c:7070": 5}, note: "a learner that has not opened it yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeReplicas{hash: tc.hashes}
			compared, bad, why := compareReplicas(ctx, all, tc.listed, f.ask, fixed(tc.now))
			if compared != tc.compared {
				t.Errorf("compared %v, want %v (violations %q, note %q)", compared, tc.compared, bad, why)
			}
			switch {
			case tc.violation == "" && len(bad) > 0:
				t.Errorf("violations %q, want none", bad)
			case tc.violation != "" && (len(bad) != 1 || !strings.Contains(bad[0], tc.violation)):
				t.Errorf("violations %q, want one with %q", bad, tc.violation)
			}
			if !strings.Contains(why, tc.note) || (tc.note == "" && why != "") {
				t.Errorf("note %q, want %q", why, tc.note)
			}
		})
	}
}
