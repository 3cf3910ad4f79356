package server

import (
	"testing"
	"time"

	"github.com/cellstore/cell/regiontable"
)

// A new replica goes to the server whose replicas hold the fewest bytes
// in use, not the fewest bytes of region files: three empty regions weigh
// less than one full one. A region whose leader did not report its bytes
// in use counts its whole size.
func TestPlaceReplicaByBytesInUse(t *testing.T) {
	const gib = 1 << 30
	v := &tableView{
		members: map[string]regiontable.Member{},
		regions: map[uint32]regiontable.Region{
			1: {ID: 1, Size: gib, Host: "a", Replicas: []string{"a"}},
			2: {ID: 2, Size: gib, Host: "a", Replicas: []string{"a"}},
			3: {ID: 3, Size: gib, Host: "a", Replicas: []string{"a"}},
			4: {ID: 4, Size: gib, Host: "b", Replicas: []string{"b"}},
			5: {ID: 5, Size: gib, Host: "c", Replicas: []string{"c", "d"}},
		},
		draining: map[string]bool{},
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		v.members[id] = regiontable.Member{ID: id, RaftAddr: id + ":1"}
	}
	place := func(used map[uint32]uint64, r regiontable.Region) string {
		t.Helper()
		s := &Server{}
		s.coord.use.used, s.coord.use.at = used, time.Now() // as the members reported
		id, ok := s.coord.placeReplica(v, nil, r)
		if !ok {
			t.Fatal("no server placed")
		}
		return id
	}
	newRegion := regiontable.Region{ID: 6, Size: gib, Replicas: []string{"c", "d"}}
	used := map[uint32]uint64{1: 64 << 10, 2: 64 << 10, 3: 64 << 10, 4: 700 << 20, 5: 10 << 20}
	if got := place(used, newRegion); got != "a" {
		t.Errorf("three nearly empty regions on a, 700 MiB in use on b: placed on %s, want a", got)
	}
	// Unknown bytes in use count the region's size: b's one region
	// weighs less than a's three.
	if got := place(map[uint32]uint64{}, newRegion); got != "b" {
		t.Errorf("nothing reported: placed on %s, want b (one region of a GiB against three)", got)
	}
	// Equal bytes in use: the fewest replicas.
	used = map[uint32]uint64{1: 0, 2: 0, 3: 0, 4: 0, 5: 0}
	if got := place(used, newRegion); got != "b" {
		t.Errorf("all empty: placed on %s, want b (one replica against three)", got)
	}
}

// The bytes in use come from the regions' leaders: every region is
// reported (one with no meganode yet at 0), and together they hold at
// least the bytes put.
func TestRegionsInUse(t *testing.T) {
	srvs, store := startReplicated(t, 3, 1, nil)
	c := newClient(t, store, "server")
	keys := putRange(t, c, 0, 300)
	v := srvs[0].table.Load()
	used := srvs[0].coord.regionsInUse(v)
	if len(used) != len(v.regions) {
		t.Fatalf("bytes in use of %d regions, the table has %d: %v", len(used), len(v.regions), used)
	}
	var total uint64
	for _, b := range used {
		total += b
	}
	var data uint64
	for _, k := range keys {
		data += uint64(2*len(k) + 1) // key and "v"+key
	}
	if total < data {
		t.Fatalf("%d bytes in use in all regions, below the %d bytes put: %v", total, data, used)
	}
	// Cached: a second call within useTTL asks nobody.
	at := srvs[0].coord.use.at
	if srvs[0].coord.regionsInUse(v); srvs[0].coord.use.at != at {
		t.Fatal("a second call within useTTL asked the members again")
	}
	t.Logf("bytes in use by region after %d puts (%d bytes of keys and values): %v", len(keys), data, used)
}
