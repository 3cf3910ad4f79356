package regiontable_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/regiontable"
)

// impl is one Store implementation under the contract tests.
type impl struct {
	// open returns a store over a fresh, empty table; the test closes it
	// (and may close it early).
	open func(t *testing.T) regiontable.Store
	// expire makes member id's lease end as if it had expired.
	expire func(t *testing.T, s regiontable.Store, id string)
	// expireCampaign makes the session lease of server id's campaigns
	// (waiting or leading) end as if it had expired, and reports whether
	// id had one.
	expireCampaign func(t *testing.T, s regiontable.Store, id string) bool
}

// contractTests is the one table of tests both implementations pass.
var contractTests = []struct {
	name string
	run  func(t *testing.T, im impl)
}{
	{"Members", testMembers},
	{"MemberValidation", testMemberValidation},
	{"LeaseLost", testLeaseLost},
	{"Regions", testRegions},
	{"RegionValidation", testRegionValidation},
	{"RootCAS", testRootCAS},
	{"RootConcurrentCAS", testRootConcurrentCAS},
	{"AllocRegionID", testAllocRegionID},
	{"LoadAndWatch", testLoadAndWatch},
	{"WatchCancel", testWatchCancel},
	{"Draining", testDraining},
	{"Missing", testMissing},
	{"Close", testClose},
	{"Election", testElection},
	{"ElectionSessionLost", testElectionSessionLost},
	{"ElectionOneLeader", testElectionOneLeader},
	{"ElectionClose", testElectionClose},
}

func runContract(t *testing.T, im impl) {
	for _, tc := range contractTests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, im) })
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func member(id string) regiontable.Member {
	return regiontable.Member{ID: id, RPCAddr: "127.0.0.1:7070", ReadAddr: "127.0.0.1:7071", HostID: "host-1", Version: "test"}
}

func mustRegister(t *testing.T, s regiontable.Store, m regiontable.Member) regiontable.Registration {
	t.Helper()
	r, err := s.RegisterMember(ctxT(t), m)
	if err != nil {
		t.Fatalf("RegisterMember(%s): %v", m.ID, err)
	}
	return r
}

func memberIDs(t *testing.T, s regiontable.Store) []string {
	t.Helper()
	ms, err := s.Members(ctxT(t))
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	ids := []string{}
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	return ids
}

func testMembers(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	if ids := memberIDs(t, s); len(ids) != 0 {
		t.Fatalf("empty table has members %v", ids)
	}
	b := mustRegister(t, s, member("srv-b"))
	a := mustRegister(t, s, member("srv-a"))
	ms, err := s.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []regiontable.Member{member("srv-a"), member("srv-b")}; !reflect.DeepEqual(ms, want) {
		t.Fatalf("Members = %+v, want %+v (sorted by ID)", ms, want)
	}
	if _, err := s.RegisterMember(ctx, member("srv-a")); !errors.Is(err, regiontable.ErrMemberExists) {
		t.Fatalf("second RegisterMember(srv-a) = %v, want ErrMemberExists", err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-a.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if err := a.Err(); err != nil {
		t.Fatalf("Err after Close = %v, want nil", err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if ids := memberIDs(t, s); !reflect.DeepEqual(ids, []string{"srv-b"}) {
		t.Fatalf("members after Close = %v, want [srv-b]", ids)
	}
	// The ID is free again.
	a2 := mustRegister(t, s, member("srv-a"))
	if ids := memberIDs(t, s); !reflect.DeepEqual(ids, []string{"srv-a", "srv-b"}) {
		t.Fatalf("members = %v", ids)
	}
	// EvictMember takes away an entry that is exactly the one named,
	// and leaves any other alone.
	other := member("srv-a")
	other.RPCAddr = "127.0.0.1:9999"
	if ok, err := s.EvictMember(ctx, other); ok || err != nil {
		t.Fatalf("EvictMember of a different entry = %v, %v", ok, err)
	}
	if ok, err := s.EvictMember(ctx, member("srv-a")); !ok || err != nil {
		t.Fatalf("EvictMember = %v, %v", ok, err)
	}
	select {
	case <-a2.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the evicted registration's Done is not closed")
	}
	if !errors.Is(a2.Err(), regiontable.ErrLeaseLost) {
		t.Fatalf("evicted registration's Err = %v", a2.Err())
	}
	a3 := mustRegister(t, s, member("srv-a"))
	if ok, err := s.EvictMember(ctx, member("srv-c")); ok || err != nil {
		t.Fatalf("EvictMember of an absent member = %v, %v", ok, err)
	}
	_ = a3.Close(ctx)
	_ = b.Close(ctx)
}

func testMemberValidation(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	for _, m := range []regiontable.Member{
		{ID: "", RPCAddr: "a:1"},
		{ID: "a/b", RPCAddr: "a:1"},
		{ID: "..", RPCAddr: "a:1"},
		{ID: "has space", RPCAddr: "a:1"},
		{ID: string(make([]byte, 129)), RPCAddr: "a:1"},
		{ID: "ok", RPCAddr: ""},
	} {
		if _, err := s.RegisterMember(ctx, m); !errors.Is(err, regiontable.ErrInvalid) {
			t.Errorf("RegisterMember(%q, %q) = %v, want ErrInvalid", m.ID, m.RPCAddr, err)
		}
	}
	if ids := memberIDs(t, s); len(ids) != 0 {
		t.Fatalf("invalid members were stored: %v", ids)
	}
}

// "If the process dies the lease expires and the member disappears."
func testLeaseLost(t *testing.T, im impl) {
	s := im.open(t)
	r := mustRegister(t, s, member("srv-a"))
	im.expire(t, s, "srv-a")
	select {
	case <-r.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("Done not closed after the lease was lost")
	}
	if err := r.Err(); !errors.Is(err, regiontable.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", err)
	}
	waitFor(t, func() bool { return len(memberIDs(t, s)) == 0 }, "member key to go")
	// The member can register again, and closing the lost registration
	// does not remove the new one.
	r2 := mustRegister(t, s, member("srv-a"))
	if err := r.Close(ctxT(t)); err != nil {
		t.Fatalf("Close of a lost registration: %v", err)
	}
	if ids := memberIDs(t, s); !reflect.DeepEqual(ids, []string{"srv-a"}) {
		t.Fatalf("members = %v, want the new registration", ids)
	}
	_ = r2.Close(ctxT(t))
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func region(id uint32, epoch uint64) regiontable.Region {
	return regiontable.Region{
		ID: id, Kind: regiontable.KindData, Size: 1 << 30, Host: "srv-a", Epoch: epoch,
		Path: fmt.Sprintf("/dev/shm/cell-%d", id),
		ReadKey: []json.RawMessage{
			json.RawMessage(`{"provider":"tcp","key":12345,"region":` + fmt.Sprint(id) + `}`),
			json.RawMessage(`{"provider":"shm","key":678,"region":` + fmt.Sprint(id) + `}`),
		},
	}
}

func testRegions(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	if _, err := s.Region(ctx, 7); !errors.Is(err, regiontable.ErrNotFound) {
		t.Fatalf("Region of an empty table = %v, want ErrNotFound", err)
	}
	r7 := region(7, 1)
	if err := s.PutRegion(ctx, r7); err != nil {
		t.Fatal(err)
	}
	got, err := s.Region(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r7) {
		t.Fatalf("Region(7) = %+v, want %+v", got, r7)
	}
	if k, ok := got.ReadKeyFor("shm"); !ok || string(k) != string(r7.ReadKey[1]) {
		t.Fatalf("ReadKeyFor(shm) = %s, %v", k, ok)
	}
	if _, ok := got.ReadKeyFor("verbs"); ok {
		t.Fatal("ReadKeyFor(verbs) present")
	}
	// Changing the returned entry does not change the table.
	got.ReadKey[0][0] = 'X'
	if again, _ := s.Region(ctx, 7); !reflect.DeepEqual(again, r7) {
		t.Fatalf("table changed through a returned entry: %+v", again)
	}
	if err := s.PutRegion(ctx, region(3, 1)); err != nil {
		t.Fatal(err)
	}
	// "an epoch only grows, and the entry with the highest epoch wins"
	if err := s.PutRegion(ctx, region(7, 0)); !errors.Is(err, regiontable.ErrStaleEpoch) {
		t.Fatalf("PutRegion with a lower epoch = %v, want ErrStaleEpoch", err)
	}
	same := region(7, 1)
	same.Path = "/other"
	if err := s.PutRegion(ctx, same); err != nil {
		t.Fatalf("PutRegion with the same epoch: %v", err)
	}
	newer := region(7, 2)
	newer.Host = "srv-b"
	if err := s.PutRegion(ctx, newer); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Regions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []regiontable.Region{region(3, 1), newer}; !reflect.DeepEqual(rs, want) {
		t.Fatalf("Regions = %+v, want %+v", rs, want)
	}

	// docs/design.md §8: "A region entry changes only by compare-and-set: a
	// leader publishes itself with a higher term, never over an equal
	// one."
	led := func(host string, term, epoch uint64) regiontable.Region {
		r := region(9, epoch)
		r.Host, r.Term, r.Replicas = host, term, []string{"srv-a", "srv-b", "srv-c"}
		return r
	}
	for _, step := range []struct {
		r  regiontable.Region
		ok bool
	}{
		{led("srv-a", 3, 1), true},
		{led("srv-a", 3, 2), true},  // the leader again, next epoch
		{led("srv-b", 3, 3), false}, // another host over an equal term
		{led("srv-a", 3, 1), false}, // an older epoch of the same term
		{led("srv-b", 2, 9), false}, // a lower term, whatever its epoch
		{led("srv-b", 4, 3), true},  // the next leader
	} {
		err := s.PutRegion(ctx, step.r)
		if step.ok != (err == nil) || err != nil && !errors.Is(err, regiontable.ErrStaleEpoch) {
			t.Fatalf("PutRegion(host %s, term %d, epoch %d) = %v, want ok %v", step.r.Host, step.r.Term, step.r.Epoch, err, step.ok)
		}
	}
	if got, err := s.Region(ctx, 9); err != nil || !reflect.DeepEqual(got, led("srv-b", 4, 3)) {
		t.Fatalf("Region(9) = %+v, %v", got, err)
	}
}

func testRegionValidation(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	bad := []regiontable.Region{
		{ID: 0, Kind: regiontable.KindData, Host: "a"},
		{ID: blink.MaxRegionID + 1, Kind: regiontable.KindData, Host: "a"},
		{ID: 1, Kind: regiontable.KindData, Host: ""},
		{ID: 1, Kind: "", Host: "a"},
	}
	for _, r := range bad {
		if err := s.PutRegion(ctx, r); !errors.Is(err, regiontable.ErrInvalid) {
			t.Errorf("PutRegion(%+v) = %v, want ErrInvalid", r, err)
		}
	}
	if _, err := s.Region(ctx, 0); !errors.Is(err, regiontable.ErrInvalid) {
		t.Errorf("Region(0) = %v, want ErrInvalid", err)
	}
	if rs, err := s.Regions(ctx); err != nil || len(rs) != 0 {
		t.Fatalf("Regions = %v, %v; want none", rs, err)
	}
}

func testRootCAS(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	if p, err := s.Root(ctx); err != nil || p != 0 {
		t.Fatalf("Root of an empty table = %v, %v", p, err)
	}
	p1, p2 := blink.MakePtr(1, 0x1000), blink.MakePtr(2, 0x2000)
	if cur, err := s.SetRoot(ctx, p1, p2); !errors.Is(err, regiontable.ErrConflict) || cur != 0 {
		t.Fatalf("SetRoot(p1, p2) on no root = %v, %v; want 0, ErrConflict", cur, err)
	}
	if cur, err := s.SetRoot(ctx, 0, p1); err != nil || cur != p1 {
		t.Fatalf("SetRoot(0, p1) = %v, %v", cur, err)
	}
	if cur, err := s.SetRoot(ctx, 0, p2); !errors.Is(err, regiontable.ErrConflict) || cur != p1 {
		t.Fatalf("SetRoot(0, p2) = %v, %v; want p1, ErrConflict", cur, err)
	}
	if cur, err := s.SetRoot(ctx, p1, p1); err != nil || cur != p1 {
		t.Fatalf("SetRoot(p1, p1) = %v, %v", cur, err)
	}
	if cur, err := s.SetRoot(ctx, p1, p2); err != nil || cur != p2 {
		t.Fatalf("SetRoot(p1, p2) = %v, %v", cur, err)
	}
	if p, err := s.Root(ctx); err != nil || p != p2 {
		t.Fatalf("Root = %v, %v; want %v", p, err, p2)
	}
}

func testRootConcurrentCAS(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	const n = 8
	var wg sync.WaitGroup
	wins := make(chan blink.Ptr, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := blink.MakePtr(uint32(i+1), 0x1000)
			cur, err := s.SetRoot(ctx, 0, p)
			switch {
			case err == nil:
				wins <- p
			case !errors.Is(err, regiontable.ErrConflict) || cur == 0:
				t.Errorf("SetRoot: %v, %v", cur, err)
			}
		}()
	}
	wg.Wait()
	close(wins)
	var won []blink.Ptr
	for p := range wins {
		won = append(won, p)
	}
	if len(won) != 1 {
		t.Fatalf("%d winners of SetRoot(0, x): %v", len(won), won)
	}
	if p, _ := s.Root(ctx); p != won[0] {
		t.Fatalf("Root = %v, winner %v", p, won[0])
	}
}

func testAllocRegionID(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	first, err := s.AllocRegionID(ctx)
	if err != nil || first != 1 {
		t.Fatalf("first AllocRegionID = %d, %v; want 1", first, err)
	}
	var mu sync.Mutex
	seen := map[uint32]bool{first: true}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				id, err := s.AllocRegionID(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[id] || id == 0 || id > blink.MaxRegionID {
					t.Errorf("AllocRegionID returned %d twice or out of range", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != 41 {
		t.Fatalf("%d distinct IDs, want 41", len(seen))
	}
	for id := uint32(1); id <= 41; id++ {
		if !seen[id] {
			t.Fatalf("ID %d skipped: IDs are handed out densely", id)
		}
	}
}

func testLoadAndWatch(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	before := mustRegister(t, s, member("srv-0"))
	if err := s.PutRegion(ctx, region(1, 1)); err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Members) != 1 || st.Members[0] != member("srv-0") || len(st.Regions) != 1 || !reflect.DeepEqual(st.Regions[0], region(1, 1)) || st.Root != 0 {
		t.Fatalf("Load = %+v", st)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := s.Watch(wctx, st.Revision)

	r := mustRegister(t, s, member("srv-a"))
	if err := s.PutRegion(ctx, region(2, 1)); err != nil {
		t.Fatal(err)
	}
	root := blink.MakePtr(2, 0x1000)
	if _, err := s.SetRoot(ctx, 0, root); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := []regiontable.Event{
		{Kind: regiontable.MemberUp, Member: member("srv-a")},
		{Kind: regiontable.RegionPut, Region: region(2, 1)},
		{Kind: regiontable.RootSet, Root: root},
		{Kind: regiontable.MemberDown, Member: regiontable.Member{ID: "srv-a"}},
	}
	last := st.Revision
	for i, w := range want {
		ev := nextEvent(t, ch)
		if ev.Revision <= last {
			t.Fatalf("event %d revision %d not after %d", i, ev.Revision, last)
		}
		last = ev.Revision
		ev.Revision = 0
		if !reflect.DeepEqual(ev, w) {
			t.Fatalf("event %d = %+v, want %+v", i, ev, w)
		}
	}
	// A watch from a later revision starts there: it sees only the
	// member going.
	ch2 := s.Watch(wctx, last-1)
	if ev := nextEvent(t, ch2); ev.Kind != regiontable.MemberDown || ev.Revision != last {
		t.Fatalf("watch from %d: %+v", last-1, ev)
	}
	_ = before.Close(ctx)
	if ev := nextEvent(t, ch); ev.Kind != regiontable.MemberDown || ev.Member.ID != "srv-0" {
		t.Fatalf("event = %+v, want srv-0 down", ev)
	}
}

func nextEvent(t *testing.T, ch <-chan regiontable.Event) regiontable.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		if ev.Err != nil {
			t.Fatalf("watch failed: %v", ev.Err)
		}
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("no watch event")
	}
	panic("unreachable")
}

func testWatchCancel(t *testing.T, im impl) {
	s := im.open(t)
	st, err := s.Load(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	ch := s.Watch(wctx, st.Revision)
	cancel()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if ev.Err != nil && !errors.Is(ev.Err, context.Canceled) {
				t.Fatalf("event after cancel: %+v", ev)
			}
		case <-deadline:
			t.Fatal("watch channel not closed after its context ended")
		}
	}
}

func testClose(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	r := mustRegister(t, s, member("srv-a"))
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := s.Watch(wctx, st.Revision)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-r.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("registration not ended by Close")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Members(ctx); !errors.Is(err, regiontable.ErrClosed) {
		t.Fatalf("Members after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Root(ctx); !errors.Is(err, regiontable.ErrClosed) {
		t.Fatalf("Root after Close = %v, want ErrClosed", err)
	}
	if _, err := s.RegisterMember(ctx, member("srv-b")); !errors.Is(err, regiontable.ErrClosed) {
		t.Fatalf("RegisterMember after Close = %v, want ErrClosed", err)
	}
	// The watch ends with an error event or by closing.
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok || ev.Err != nil {
				return
			}
		case <-deadline:
			t.Fatal("watch did not end after Close")
		}
	}
}

func mustCampaign(t *testing.T, s regiontable.Store, id string) regiontable.Leadership {
	t.Helper()
	l, err := s.Campaign(ctxT(t), id)
	if err != nil {
		t.Fatalf("Campaign(%s): %v", id, err)
	}
	return l
}

type campaignResult struct {
	l   regiontable.Leadership
	err error
}

// campaignAsync campaigns in a goroutine; the result arrives on the
// channel.
func campaignAsync(s regiontable.Store, ctx context.Context, id string) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		l, err := s.Campaign(ctx, id)
		ch <- campaignResult{l, err}
	}()
	return ch
}

// awaitCampaign waits for the result of campaignAsync.
func awaitCampaign(t *testing.T, ch <-chan campaignResult, id string) campaignResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(15 * time.Second):
		t.Fatalf("campaign of %s still waiting", id)
	}
	panic("unreachable")
}

// mustStillWait fails if the campaign on ch was decided within a moment.
func mustStillWait(t *testing.T, ch <-chan campaignResult, id string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("campaign of %s ended (%v) while another leads", id, r.err)
	case <-time.After(200 * time.Millisecond):
	}
}

func coordinator(t *testing.T, s regiontable.Store) string {
	t.Helper()
	id, err := s.Coordinator(ctxT(t))
	if errors.Is(err, regiontable.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatalf("Coordinator: %v", err)
	}
	return id
}

func waitCoordinator(t *testing.T, s regiontable.Store, want string) {
	t.Helper()
	waitFor(t, func() bool { return coordinator(t, s) == want }, fmt.Sprintf("coordinator %q", want))
}

func mustEnd(t *testing.T, l regiontable.Leadership, what string) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(15 * time.Second):
		t.Fatalf("leadership not ended after %s", what)
	}
}

// "one leader at a time, in the order the campaigns joined"
func testElection(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	if id, err := s.Coordinator(ctx); !errors.Is(err, regiontable.ErrNotFound) {
		t.Fatalf("Coordinator of an empty table = %q, %v; want ErrNotFound", id, err)
	}
	for _, id := range []string{"", "a/b", ".."} {
		if _, err := s.Campaign(ctx, id); !errors.Is(err, regiontable.ErrInvalid) {
			t.Errorf("Campaign(%q) = %v, want ErrInvalid", id, err)
		}
	}
	a := mustCampaign(t, s, "srv-a")
	if got := coordinator(t, s); got != "srv-a" {
		t.Fatalf("Coordinator = %q, want srv-a", got)
	}
	b := campaignAsync(s, ctx, "srv-b")
	mustStillWait(t, b, "srv-b")
	// A campaign given up by its context fails with the context's error
	// and is withdrawn.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := s.Campaign(cctx, "srv-c")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign with an expiring context = %v, want DeadlineExceeded", err)
	}
	if got := coordinator(t, s); got != "srv-a" {
		t.Fatalf("Coordinator = %q, want srv-a", got)
	}
	select {
	case <-a.Done():
		t.Fatal("leadership ended while held")
	default:
	}
	// On Resign the next campaigner is elected.
	if err := a.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	mustEnd(t, a, "Resign")
	if err := a.Err(); err != nil {
		t.Fatalf("Err after Resign = %v, want nil", err)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatalf("second Resign: %v", err)
	}
	rb := awaitCampaign(t, b, "srv-b")
	if rb.err != nil {
		t.Fatalf("Campaign(srv-b) after srv-a resigned: %v", rb.err)
	}
	waitCoordinator(t, s, "srv-b")
	if err := rb.l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	// srv-c withdrew: nobody is left.
	waitCoordinator(t, s, "")
}

// "the next campaigner takes over on session loss"
func testElectionSessionLost(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	a := mustCampaign(t, s, "srv-a")
	b := campaignAsync(s, ctx, "srv-b")
	mustStillWait(t, b, "srv-b")
	if !im.expireCampaign(t, s, "srv-a") {
		t.Fatal("srv-a has no campaign to expire")
	}
	mustEnd(t, a, "its session was lost")
	if err := a.Err(); !errors.Is(err, regiontable.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", err)
	}
	rb := awaitCampaign(t, b, "srv-b")
	if rb.err != nil {
		t.Fatalf("Campaign(srv-b) after srv-a's session was lost: %v", rb.err)
	}
	waitCoordinator(t, s, "srv-b")
	// Resigning a lost leadership is a no-op and keeps its error.
	if err := a.Resign(ctx); err != nil {
		t.Fatalf("Resign of a lost leadership: %v", err)
	}
	if err := a.Err(); !errors.Is(err, regiontable.ErrLeaseLost) {
		t.Fatalf("Err after Resign of a lost leadership = %v, want ErrLeaseLost", err)
	}
	// A waiting campaign whose session is lost fails with ErrLeaseLost.
	c := campaignAsync(s, ctx, "srv-c")
	waitFor(t, func() bool { return im.expireCampaign(t, s, "srv-c") }, "srv-c's campaign to join")
	if rc := awaitCampaign(t, c, "srv-c"); !errors.Is(rc.err, regiontable.ErrLeaseLost) {
		t.Fatalf("Campaign(srv-c) whose session was lost = %v, want ErrLeaseLost", rc.err)
	}
	if got := coordinator(t, s); got != "srv-b" {
		t.Fatalf("Coordinator = %q, want srv-b", got)
	}
	// The lost server campaigns again and leads after srv-b.
	a2 := campaignAsync(s, ctx, "srv-a")
	mustStillWait(t, a2, "srv-a")
	if err := rb.l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	ra := awaitCampaign(t, a2, "srv-a")
	if ra.err != nil {
		t.Fatalf("second Campaign(srv-a): %v", ra.err)
	}
	waitCoordinator(t, s, "srv-a")
	_ = ra.l.Resign(ctx)
}

// Concurrent campaigners are elected one at a time, each once.
func testElectionOneLeader(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	const n = 5
	var leaders, maxLeaders atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("srv-%d", i)
			l, err := s.Campaign(ctx, id)
			if err != nil {
				t.Errorf("Campaign(%s): %v", id, err)
				return
			}
			cur := leaders.Add(1)
			for m := maxLeaders.Load(); cur > m && !maxLeaders.CompareAndSwap(m, cur); m = maxLeaders.Load() {
			}
			if got, err := s.Coordinator(ctx); err != nil || got != id {
				t.Errorf("Coordinator while %s leads = %q, %v", id, got, err)
			}
			time.Sleep(20 * time.Millisecond)
			leaders.Add(-1)
			if err := l.Resign(ctx); err != nil {
				t.Errorf("Resign(%s): %v", id, err)
			}
		}()
	}
	wg.Wait()
	if m := maxLeaders.Load(); m != 1 {
		t.Fatalf("%d leaders at once", m)
	}
	if got := coordinator(t, s); got != "" {
		t.Fatalf("Coordinator after everyone resigned = %q", got)
	}
}

// Close ends leaderships and campaigns.
func testElectionClose(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	a := mustCampaign(t, s, "srv-a")
	b := campaignAsync(s, ctx, "srv-b")
	mustStillWait(t, b, "srv-b")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	mustEnd(t, a, "Close")
	if err := a.Err(); !errors.Is(err, regiontable.ErrLeaseLost) {
		t.Fatalf("Err after Close = %v, want ErrLeaseLost", err)
	}
	if rb := awaitCampaign(t, b, "srv-b"); !errors.Is(rb.err, regiontable.ErrClosed) {
		t.Fatalf("waiting Campaign after Close = %v, want ErrClosed", rb.err)
	}
	if _, err := s.Campaign(ctx, "srv-c"); !errors.Is(err, regiontable.ErrClosed) {
		t.Fatalf("Campaign after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Coordinator(ctx); !errors.Is(err, regiontable.ErrClosed) {
		t.Fatalf("Coordinator after Close = %v, want ErrClosed", err)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatalf("Resign after Close: %v", err)
	}
}

// testDraining: SetDraining marks and unmarks a server, whether or not it
// is a member; Load lists the marks and Watch delivers their changes.
func testDraining(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	st0, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetDraining(ctx, "../x", true); !errors.Is(err, regiontable.ErrInvalid) {
		t.Fatalf("SetDraining(bad id) = %v, want ErrInvalid", err)
	}
	for _, id := range []string{"s2", "s1", "s3"} {
		if err := s.SetDraining(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetDraining(ctx, "s3", false); err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"s1", "s2"}; !slices.Equal(st.Draining, want) {
		t.Fatalf("Load().Draining = %v, want %v", st.Draining, want)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := s.Watch(wctx, st0.Revision)
	var got []string
	for len(got) < 4 {
		ev := <-ch
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		if ev.Kind != regiontable.DrainSet {
			continue
		}
		got = append(got, fmt.Sprintf("%s=%v", ev.Member.ID, ev.Draining))
	}
	if want := []string{"s2=true", "s1=true", "s3=true", "s3=false"}; !slices.Equal(got, want) {
		t.Fatalf("watched %v, want %v", got, want)
	}
}

// testMissing: MarkMissing writes and rewrites the mark of a server that
// is not a member, never of a member; RegisterMember clears the member's
// mark; ClearMissing clears one. Load lists the marks with their
// durations and Watch delivers their changes.
func testMissing(t *testing.T, im impl) {
	s := im.open(t)
	ctx := ctxT(t)
	st0, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkMissing(ctx, "../x", time.Second); !errors.Is(err, regiontable.ErrInvalid) {
		t.Fatalf("MarkMissing(bad id) = %v, want ErrInvalid", err)
	}
	if _, err := s.MarkMissing(ctx, "x", -time.Second); !errors.Is(err, regiontable.ErrInvalid) {
		t.Fatalf("MarkMissing(d < 0) = %v, want ErrInvalid", err)
	}
	if err := s.ClearMissing(ctx, "../x"); !errors.Is(err, regiontable.ErrInvalid) {
		t.Fatalf("ClearMissing(bad id) = %v, want ErrInvalid", err)
	}
	mark := func(id string, d time.Duration, want bool) {
		t.Helper()
		ok, err := s.MarkMissing(ctx, id, d)
		if err != nil || ok != want {
			t.Fatalf("MarkMissing(%s, %v) = %v, %v; want %v", id, d, ok, err, want)
		}
	}
	live := mustRegister(t, s, member("live"))
	defer live.Close(ctx)
	mark("live", time.Second, false) // a member is not missing
	mark("a", 0, true)
	mark("a", 5*time.Second+7, true) // rewritten as the count goes on
	mark("b", time.Minute, true)
	mark("c", time.Second, true)
	if err := s.ClearMissing(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if err := s.ClearMissing(ctx, "never-marked"); err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]time.Duration{"a": 5*time.Second + 7, "b": time.Minute}; !reflect.DeepEqual(st.Missing, want) {
		t.Fatalf("Load().Missing = %v, want %v", st.Missing, want)
	}
	// b comes back: its registration clears its mark.
	back := mustRegister(t, s, member("b"))
	defer back.Close(ctx)
	if st, err = s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if want := map[string]time.Duration{"a": 5*time.Second + 7}; !reflect.DeepEqual(st.Missing, want) {
		t.Fatalf("after b registered, Load().Missing = %v, want %v", st.Missing, want)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := s.Watch(wctx, st0.Revision)
	var got []string
	for len(got) < 6 {
		ev := nextEvent(t, ch)
		if ev.Kind != regiontable.MissingSet {
			continue
		}
		at := "cleared"
		if ev.Missing {
			at = ev.MissingFor.String()
		}
		got = append(got, ev.Member.ID+"="+at)
	}
	if want := []string{"a=0s", "a=5.000000007s", "b=1m0s", "c=1s", "c=cleared", "b=cleared"}; !slices.Equal(got, want) {
		t.Fatalf("watched %v, want %v", got, want)
	}
}
