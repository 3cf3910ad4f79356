package server

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cellstore/cell/regiontable"
)

// viewOf is a table view with members, regions (each listing its host
// first, then its other replicas) and missing marks.
func viewOf(members []string, regions [][]string, missing map[string]time.Duration) *tableView {
	st := regiontable.State{Missing: missing}
	for _, id := range members {
		st.Members = append(st.Members, regiontable.Member{ID: id})
	}
	for i, ids := range regions {
		st.Regions = append(st.Regions, regiontable.Region{ID: uint32(i + 1), Host: ids[0], Replicas: ids})
	}
	return newTableView(st)
}

// A server counts a missing server from when it saw it go, or from its
// mark back from now if that is earlier; a member counts as not missing
// whatever its mark; the coordinator writes the marks it lacks or that
// lag its count by the interval, and clears those of servers no region
// lists.
func TestGoneServersCountFromMarks(t *testing.T) {
	t0 := time.Now()
	var g goneServers
	regions := [][]string{{"a", "b", "c"}, {"b", "c", "d"}}

	g.note(viewOf([]string{"a", "b", "c"}, regions, nil), t0)
	if got := g.dead(t0.Add(9*time.Second), 10*time.Second); len(got) != 0 {
		t.Fatalf("dead 9 s after d went, with dead-after 10 s: %v", got)
	}
	if got := g.dead(t0.Add(10*time.Second), 10*time.Second); !got["d"] || len(got) != 1 {
		t.Fatalf("dead 10 s after d went: %v, want d", got)
	}
	// The coordinator lacks d's mark.
	add, clear := g.marks(viewOf([]string{"a", "b", "c"}, regions, nil), t0.Add(2*time.Second), 5*time.Second)
	if want := map[string]time.Duration{"d": 2 * time.Second}; !maps.Equal(add, want) || len(clear) != 0 {
		t.Fatalf("marks: add %v clear %v, want add %v", add, clear, want)
	}
	// A mark written less than the interval ago is left; one that lags
	// by the interval is written again.
	marked := viewOf([]string{"a", "b", "c"}, regions, map[string]time.Duration{"d": 2 * time.Second})
	if add, _ := g.marks(marked, t0.Add(6*time.Second), 5*time.Second); len(add) != 0 {
		t.Fatalf("marks 4 s after a mark of 2 s: add %v, want none", add)
	}
	if add, _ := g.marks(marked, t0.Add(7*time.Second), 5*time.Second); add["d"] != 7*time.Second {
		t.Fatalf("marks 5 s after a mark of 2 s: add %v, want d=7s", add)
	}

	// A server that starts later goes on from the mark.
	var fresh goneServers
	later := t0.Add(time.Hour)
	fresh.note(viewOf([]string{"a", "b", "c"}, regions, map[string]time.Duration{"d": 8 * time.Second}), later)
	if got := fresh.dead(later.Add(2*time.Second), 10*time.Second); !got["d"] {
		t.Fatalf("2 s after loading a mark of 8 s, dead-after 10 s: %v, want d dead", got)
	}
	// Its own, earlier count wins over a later mark.
	g.note(marked, t0.Add(6*time.Second))
	if got := g.dead(t0.Add(10*time.Second), 10*time.Second); !got["d"] {
		t.Fatalf("a mark read later moved the count back: %v", got)
	}

	// d returns: not gone, whatever a (stale) view marks.
	back := viewOf([]string{"a", "b", "c", "d"}, regions, map[string]time.Duration{"d": time.Minute})
	g.note(back, t0.Add(11*time.Second))
	if got := g.dead(t0.Add(time.Hour), 10*time.Second); len(got) != 0 {
		t.Fatalf("after d returned: dead %v", got)
	}
	if add, clear := g.marks(back, t0.Add(12*time.Second), 5*time.Second); len(add) != 0 || !slices.Equal(clear, []string{"d"}) {
		t.Fatalf("marks with d a member: add %v clear %v, want clear [d]", add, clear)
	}
	// e goes, is marked, and its replicas are replaced: listed by no
	// region, it is counted no more and loses its mark, once.
	withE := [][]string{{"a", "b", "e"}, {"b", "c", "d"}}
	g.note(viewOf([]string{"a", "b", "c", "d"}, withE, nil), t0.Add(14*time.Second))
	if add, _ := g.marks(viewOf([]string{"a", "b", "c", "d"}, withE, nil), t0.Add(15*time.Second), 5*time.Second); add["e"] != time.Second {
		t.Fatalf("marks while e is missing: add %v, want e=1s", add)
	}
	replaced := viewOf([]string{"a", "b", "c", "d"}, regions, map[string]time.Duration{"e": time.Second})
	g.note(replaced, t0.Add(16*time.Second))
	if got := g.dead(t0.Add(time.Hour), 10*time.Second); len(got) != 0 {
		t.Fatalf("e, listed nowhere, is counted: dead %v", got)
	}
	if add, clear := g.marks(replaced, t0.Add(17*time.Second), 5*time.Second); len(add) != 0 || !slices.Equal(clear, []string{"e"}) {
		t.Fatalf("marks with e listed nowhere: add %v clear %v, want clear [e]", add, clear)
	}
	cleared := viewOf([]string{"a", "b", "c", "d"}, regions, nil)
	g.note(cleared, t0.Add(18*time.Second))
	if add, clear := g.marks(cleared, t0.Add(30*time.Second), 5*time.Second); len(add) != 0 || len(clear) != 0 {
		t.Fatalf("marks once e's mark went: add %v clear %v, want nothing (no mark written again)", add, clear)
	}
}

// "How long a server has been gone is each server's own count ... a
// coordinator that has itself just started counts from its start and
// waits a full --dead-after" was so before the coordinator marked its
// count in the table: a server that starts while another is missing now
// counts from the mark, from before its own start. The mark goes when the
// missing server returns.
func TestMissingCountOutlivesRestart(t *testing.T) {
	srvs, store := startReplicated(t, 4, 3, func(i int, o *Options) {
		o.DeadAfter = time.Hour // nothing is replaced here
		o.BalanceInterval = -1
		o.TestingKnobs.MissingMarkEvery = 200 * time.Millisecond
	})
	ctx := repairCtx(t)
	victim := followingServer(t, srvs)
	id := victim.opts.ServerID
	victimOpts := restartOptions(victim)
	if err := victim.Close(); err != nil {
		t.Fatal(err)
	}
	// The coordinator marks it, and writes the mark again as its count
	// goes on.
	for {
		st, err := store.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Missing[id] >= 3*time.Second {
			t.Logf("%s marked missing for %v", id, st.Missing[id])
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s not marked missing for 3 s: marks %v", id, st.Missing)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Another server starts again: it counts from before its start.
	var other *Server
	for _, s := range srvs {
		if s != victim && !s.IsCoordinator() {
			other = s
			break
		}
	}
	opts := restartOptions(other)
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	back := restartServer(t, opts)
	for {
		back.coord.gone.mu.Lock()
		since, ok := back.coord.gone.since[id]
		back.coord.gone.mu.Unlock()
		if ok && since.Before(start) {
			t.Logf("%s, started %v after %s went missing, counts it gone for %v", other.opts.ServerID, start.Sub(since).Round(time.Millisecond), id, time.Since(since).Round(time.Millisecond))
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s counts %s gone since %v (found %v), not from before its start", other.opts.ServerID, id, since, ok)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The missing server returns: its registration clears the mark, and
	// the coordinator writes none again.
	restartServer(t, victimOpts)
	time.Sleep(2 * repairInterval)
	st, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := st.Missing[id]; ok {
		t.Fatalf("%s returned, yet the table marks it missing for %v", id, d)
	}
}
