package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/regiontable"
)

// Versions, docs/transactions.md §2 ("Every key carries a version ... per
// key, versions strictly increase, and a (key, version) pair never names
// two contents, including absent → present → absent. They stay increasing
// across restarts, failover and meganode splits that move a key to
// another region").

// waitVersioned waits until s's own region applied its version record.
func waitVersioned(t *testing.T, s *Server) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if v, _, _ := s.reps.own.sm.Versions(); v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: region %d has no versions after 20 s", s.opts.ServerID, s.RegionID())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// getKV reads key through c: its version, or 0 and false when absent.
func getKV(t *testing.T, c *client.Client, key string) (uint64, string, bool) {
	t.Helper()
	var kv client.KV
	err := opCall(func(ctx context.Context) (err error) {
		kv, err = c.GetKV(ctx, []byte(key))
		return err
	})
	if err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return 0, "", false
		}
		t.Fatalf("GetKV %q: %v", key, err)
	}
	return kv.Version, string(kv.Value), true
}

func mustPut(t *testing.T, c *client.Client, key, value string) {
	t.Helper()
	if err := opCall(func(ctx context.Context) error { return c.Put(ctx, []byte(key), []byte(value)) }); err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
}

// TestVersionsGrowPerKey: a put gives its key a version above every one it
// had, also after a delete (absent → present → absent → present); reads
// server-side and one-sided, Get and Range, agree on it; a restart keeps
// every version and the clock.
func TestVersionsGrowPerKey(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	s1 := startUnclosed(t, opts)
	waitVersioned(t, s1)
	srvC, cliC := newClient(t, store, "server"), newClient(t, store, "client")
	last := map[string]uint64{}
	check := func(step string, c *client.Client) {
		t.Helper()
		for k, want := range last {
			v, val, ok := getKV(t, c, k)
			if want == 0 {
				if ok {
					t.Fatalf("%s: deleted %q present (version %d)", step, k, v)
				}
				continue
			}
			if !ok || v != want || val == "" {
				t.Fatalf("%s: %q version %d (present %v), want %d", step, k, v, ok, want)
			}
		}
	}
	for round := range 3 {
		for i := range 200 {
			k := fmt.Sprintf("k%03d", i)
			if round == 1 && i%2 == 0 {
				if err := opCall(func(ctx context.Context) error { return srvC.Delete(ctx, []byte(k)) }); err != nil {
					t.Fatal(err)
				}
				last[k] = 0
				continue
			}
			mustPut(t, srvC, k, fmt.Sprintf("v%d", round))
			v, _, ok := getKV(t, srvC, k)
			if !ok || v == 0 {
				t.Fatalf("round %d: %q has version %d after a put", round, k, v)
			}
			prev, seen := last[k]
			if seen && v <= prev {
				t.Fatalf("round %d: %q version %d after %d: versions must grow", round, k, v, prev)
			}
			last[k] = v
		}
		check(fmt.Sprintf("round %d server-side", round), srvC)
		check(fmt.Sprintf("round %d one-sided", round), cliC)
	}
	// Range (server-side and one-sided pages) shows the same versions.
	for mode, c := range map[string]*client.Client{"server": srvC, "client": cliC} {
		var pairs []client.KV
		if err := opCall(func(ctx context.Context) (err error) {
			pairs, _, err = c.Range(ctx, nil, nil, client.RangeOptions{Versions: true})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, kv := range pairs {
			if want := last[string(kv.Key)]; kv.Version != want {
				t.Fatalf("%s range: %q version %d, want %d", mode, kv.Key, kv.Version, want)
			}
		}
	}
	_, _, clock := s1.reps.own.sm.Versions()
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	opts.Registry, opts.Logger = nil, testLogger(t)
	s2 := startServer(t, opts)
	if _, _, c2 := s2.reps.own.sm.Versions(); c2 < clock {
		t.Fatalf("clock %d after a restart, %d before", c2, clock)
	}
	c3 := newClient(t, store, "server")
	check("after restart", c3)
	mustPut(t, c3, "k001", "again")
	if v, _, _ := getKV(t, c3, "k001"); v <= last["k001"] {
		t.Fatalf("after restart: k001 version %d, had %d", v, last["k001"])
	}
}

// TestVersionRecordUpgradesARegion: a region written before versions (a
// server with NoVersions) has none; the next start with versions proposes
// the version record: every key written before reads as the legacy
// version U, one-sided and server-side alike, and the next put of a key
// gets a version above U.
func TestVersionRecordUpgradesARegion(t *testing.T) {
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	opts.TestingKnobs.NoVersions = true
	s1 := startUnclosed(t, opts)
	c := newClient(t, store, "server")
	for i := range 300 {
		mustPut(t, c, fmt.Sprintf("old%03d", i), "x")
	}
	if v, _, ok := getKV(t, c, "old007"); !ok || v != 0 {
		t.Fatalf("before versions: version %d, present %v; want 0, true", v, ok)
	}
	time.Sleep(3 * replicaInterval) // a server without versions never starts them
	if v, _, _ := s1.reps.own.sm.Versions(); v {
		t.Fatal("a server with NoVersions started versions")
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	opts.TestingKnobs.NoVersions = false
	opts.Registry, opts.Logger = nil, testLogger(t)
	s2 := startServer(t, opts)
	waitVersioned(t, s2)
	_, legacy, _ := s2.reps.own.sm.Versions()
	if legacy == 0 {
		t.Fatal("versioned with legacy version 0")
	}
	for mode, cl := range map[string]*client.Client{"server": newClient(t, store, "server"), "client": newClient(t, store, "client")} {
		for _, k := range []string{"old000", "old150", "old299"} {
			if v, _, ok := getKV(t, cl, k); !ok || v != legacy {
				t.Fatalf("%s: %q version %d (present %v), want the legacy version %d", mode, k, v, ok, legacy)
			}
		}
	}
	c2 := newClient(t, store, "client")
	mustPut(t, c2, "old150", "y")
	if v, _, _ := getKV(t, c2, "old150"); v <= legacy {
		t.Fatalf("a put after the upgrade gave version %d, legacy %d", v, legacy)
	}
	// The leaf the put rewrote is versioned; its neighbours keep U.
	if v, _, _ := getKV(t, c2, "old151"); v != legacy {
		t.Fatalf("old151: version %d, want %d", v, legacy)
	}
}

// TestVersionsAcrossRemoteSplits: keys that a remote split moves to
// another server's region keep their versions, and their next put gives a
// version above the one they came with, although the target region's log
// is far shorter than the source's (docs/transactions.md §2.3: "the target
// applies Clock = max(Clock, source clock)"). With SplitNoFloor (no
// clock in the commit) the same run must find a version that went back:
// the test can fail.
func TestVersionsAcrossRemoteSplits(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("no-floor=%v", broken), func(t *testing.T) {
			wentBack := versionsAcrossRemoteSplits(t, broken)
			switch {
			case !broken && wentBack != "":
				t.Fatal(wentBack)
			case broken && wentBack == "":
				t.Fatal("without raising the target's clock no version went back: the check cannot fail")
			}
		})
	}
}

// versionsAcrossRemoteSplits runs the remote split scenario and returns
// the first version that did not grow ("" when none).
func versionsAcrossRemoteSplits(t *testing.T, noFloor bool) string {
	srvs, store := startCluster(t, 2, func(i int, o *Options) {
		o.SplitPlacement = PlaceRemote
		o.TestingKnobs.SplitNoFloor = noFloor
	})
	for _, s := range srvs {
		waitVersioned(t, s)
	}
	c := newClient(t, store, "server")
	// Many writes to a few keys at the top of the key space first, before
	// any split: the source region's clock runs far ahead of the log of
	// the other server's region. Then new keys below them, until remote
	// splits move the upper halves (the hot keys) there.
	var keys []string
	for i := range 100 {
		keys = append(keys, fmt.Sprintf("z%04d", i))
	}
	for round := range 25 {
		for _, k := range keys[:100] {
			mustPut(t, c, k, fmt.Sprint(round))
		}
	}
	for i := range 2000 {
		k := fmt.Sprintf("key%05d", i)
		mustPut(t, c, k, "x")
		keys = append(keys, k)
	}
	if remoteSplitsDone(t, srvs) == 0 {
		t.Fatal("no remote split")
	}
	before := map[string]uint64{}
	for _, k := range keys {
		v, _, ok := getKV(t, c, k)
		if !ok || v == 0 {
			t.Fatalf("%q: version %d present %v", k, v, ok)
		}
		before[k] = v
	}
	for _, k := range keys {
		mustPut(t, c, k, "again")
		if v, _, _ := getKV(t, c, k); v <= before[k] {
			return fmt.Sprintf("%q: version %d after a put, %d before", k, v, before[k])
		}
	}
	return ""
}

// TestVersionsAcrossFailover: after the host of a replicated region stops,
// the new leader answers the same versions (they are in the replicated
// image), and its next puts give each key a version above its last.
func TestVersionsAcrossFailover(t *testing.T) {
	srvs, store := startReplicated(t, 3, 3, func(i int, o *Options) {
		o.SplitPlacement = PlaceLocal
	})
	host := srvs[0]
	waitVersioned(t, host)
	c := newClient(t, store, "server")
	last := map[string]uint64{}
	for round := range 2 {
		for i := range 300 {
			k := fmt.Sprintf("f%04d", i)
			mustPut(t, c, k, fmt.Sprint(round))
			v, _, _ := getKV(t, c, k)
			last[k] = v
		}
	}
	if err := host.Close(); err != nil {
		t.Fatal(err)
	}
	for mode, cl := range map[string]*client.Client{"server": c, "client": newClient(t, store, "client")} {
		for k, want := range last {
			if v, _, ok := getKV(t, cl, k); !ok || v != want {
				t.Fatalf("%s after failover: %q version %d, want %d", mode, k, v, want)
			}
		}
	}
	for k, prev := range last {
		mustPut(t, c, k, "after")
		if v, _, _ := getKV(t, c, k); v <= prev {
			t.Fatalf("after failover: %q version %d, had %d", k, v, prev)
		}
	}
}
