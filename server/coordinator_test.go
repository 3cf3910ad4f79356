package server

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cellstore/cell/regiontable"
)

// waitFor polls cond until it holds, failing the test after 15 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startPair starts two servers, test-1 and test-2, over one memory table.
func startPair(t *testing.T) (*regiontable.Memory, [2]*Server) {
	store := regiontable.NewMemory()
	t.Cleanup(func() { _ = store.Close() })
	var srv [2]*Server
	for i := range srv {
		o := testOptions(t, store)
		o.ServerID = fmt.Sprintf("test-%d", i+1)
		srv[i] = startServer(t, o)
	}
	return store, srv
}

// theCoordinator waits until exactly one server of srv is coordinator,
// and the table names it; it returns its index. (Two may believe they
// lead for a moment after a lease was lost: the deposed one learns it
// from its Leadership.)
func theCoordinator(t *testing.T, store regiontable.Store, srv [2]*Server) int {
	t.Helper()
	idx := -1
	waitFor(t, func() bool {
		idx = -1
		for i, s := range srv {
			if s.IsCoordinator() {
				if idx >= 0 {
					return false
				}
				idx = i
			}
		}
		if idx < 0 {
			return false
		}
		id, err := store.Coordinator(ctxT(t))
		return err == nil && id == srv[idx].opts.ServerID
	}, "one coordinator")
	return idx
}

// waitCampaigners waits until the election holds exactly the campaigns
// of srv, in that order (the leader first).
func waitCampaigners(t *testing.T, store *regiontable.Memory, srv ...*Server) {
	t.Helper()
	want := make([]string, len(srv))
	for i, s := range srv {
		want[i] = s.opts.ServerID
	}
	waitFor(t, func() bool { return slices.Equal(store.Campaigners(), want) }, fmt.Sprintf("campaigners %v", want))
}

func gauge(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	return metricValue(gather(t, s), name, nil)
}

// "a coordinator election": of two servers exactly one coordinates; when
// it closes, the other takes over and reports the closed server's region
// unavailable.
func TestCoordinatorTakeoverOnClose(t *testing.T) {
	store, srv := startPair(t)
	i := theCoordinator(t, store, srv)
	lead, other := srv[i], srv[1-i]
	if g := gauge(t, lead, "cell_coordinator"); g != 1 {
		t.Fatalf("cell_coordinator of the coordinator = %v, want 1", g)
	}
	if g := gauge(t, other, "cell_coordinator"); g != 0 {
		t.Fatalf("cell_coordinator of the other = %v, want 0", g)
	}
	// Both regions have live hosts.
	time.Sleep(regionDownGrace + 100*time.Millisecond)
	if g := gauge(t, lead, "cell_regions_unavailable"); g != 0 {
		t.Fatalf("cell_regions_unavailable = %v with every host up", g)
	}
	if err := lead.Close(); err != nil {
		t.Fatal(err)
	}
	if lead.IsCoordinator() {
		t.Fatal("a closed server is coordinator")
	}
	waitFor(t, other.IsCoordinator, "the other server to take over")
	if id, err := store.Coordinator(ctxT(t)); err != nil || id != other.opts.ServerID {
		t.Fatalf("Coordinator = %q, %v; want %s", id, err, other.opts.ServerID)
	}
	if g := gauge(t, other, "cell_coordinator"); g != 1 {
		t.Fatalf("cell_coordinator of the new coordinator = %v, want 1", g)
	}
	// The closed server's region stays in the table without a host.
	waitFor(t, func() bool { return gauge(t, other, "cell_regions_unavailable") == 1 }, "cell_regions_unavailable 1")
}

// A coordinator whose session lease is lost stops coordinating and
// campaigns again; the other takes over, and the first one is elected
// again when the second loses its lease too.
func TestCoordinatorTakeoverOnSessionLoss(t *testing.T) {
	store, srv := startPair(t)
	i := theCoordinator(t, store, srv)
	lead, other := srv[i], srv[1-i]
	waitCampaigners(t, store, lead, other)
	if !store.ExpireCampaign(lead.opts.ServerID) {
		t.Fatal("the coordinator has no campaign")
	}
	if j := theCoordinator(t, store, srv); srv[j] != other {
		t.Fatalf("coordinator after %s lost its lease: %s", lead.opts.ServerID, srv[j].opts.ServerID)
	}
	if g := gauge(t, lead, "cell_coordinator"); g != 0 {
		t.Fatalf("cell_coordinator of the deposed coordinator = %v, want 0", g)
	}
	// The deposed one campaigns again at once: it is next.
	waitCampaigners(t, store, other, lead)
	if !store.ExpireCampaign(other.opts.ServerID) {
		t.Fatal("the new coordinator has no campaign")
	}
	if j := theCoordinator(t, store, srv); srv[j] != lead {
		t.Fatalf("coordinator after %s lost its lease: %s", other.opts.ServerID, srv[j].opts.ServerID)
	}
}
