package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/internal/testutil"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/regiontable/embedded"
)

// memberLeaseTTL is the lease of the servers' member keys and campaign
// sessions: cellserver has no flag for it, so the default.
const memberLeaseTTL = regiontable.DefaultLeaseTTL

// testEtcd is an etcd the test runs in its own process
// (regiontable/embedded) on loopback ports and a data directory that stay
// the same across stop and restart. The test's cleanup stops it.
type testEtcd struct {
	dir, client, peer string
	logger            *slog.Logger
	mu                sync.Mutex
	e                 *embedded.Etcd // nil while stopped
}

// startEtcd starts an etcd on free loopback ports with its data in a
// temporary directory.
func startEtcd(t testing.TB) *testEtcd {
	t.Helper()
	dir := t.TempDir()
	var lastErr error
	for range 3 { // a port may be taken between FreeAddrs and etcd's listen
		a := testutil.FreeAddrs(t, 2)
		e := &testEtcd{dir: dir, client: a[0], peer: a[1],
			logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
		if lastErr = e.start(); lastErr == nil {
			t.Cleanup(e.stop)
			return e
		}
	}
	t.Fatalf("start etcd: %v", lastErr)
	return nil
}

func (e *testEtcd) start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.e != nil {
		return errors.New("etcd already running")
	}
	ee, err := embedded.Start(embedded.Options{Dir: e.dir, ClientAddr: e.client, PeerAddr: e.peer, Logger: e.logger})
	if err != nil {
		return err
	}
	e.e = ee
	return nil
}

// endpoint is the client URL servers and clients use.
func (e *testEtcd) endpoint() string { return "http://" + e.client }

// stop stops etcd (a graceful stop: clients see their connections go).
// Stopping a stopped etcd does nothing.
func (e *testEtcd) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.e != nil {
		_ = e.e.Close()
		e.e = nil
	}
}

// restart starts the stopped etcd again on the same ports and data
// directory, retrying for a while if a port is still held.
func (e *testEtcd) restart(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := e.start()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("restart etcd on %s: %v", e.client, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cli returns an etcd client for inspecting the table, closed at cleanup.
func (e *testEtcd) cli(t testing.TB) *regiontable.Etcd {
	t.Helper()
	st, err := regiontable.OpenEtcd([]string{e.endpoint()}, regiontable.EtcdOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// testCluster is an etcd and cellservers joined to it.
type testCluster struct {
	etcd    *testEtcd
	opts    serverOptions
	servers []*cellServer
	table   *regiontable.Etcd // for inspection
}

// startCluster starts an etcd and n cellservers pointing at it, one after
// the other (the first creates the root meganode). Everything stops when
// the test ends: the servers first, then etcd.
func startCluster(t testing.TB, n int, o serverOptions) *testCluster {
	t.Helper()
	e := startEtcd(t)
	o.etcdEndpoint = e.endpoint()
	c := &testCluster{etcd: e, opts: o, table: e.cli(t)}
	for range n {
		c.addServer(t)
	}
	return c
}

// addServer starts one more cellserver in the cluster.
func (c *testCluster) addServer(t testing.TB) *cellServer {
	t.Helper()
	s := startServer(t, c.opts)
	c.servers = append(c.servers, s)
	return s
}

// newClient connects a client through etcd, closed when the test ends.
func (c *testCluster) newClient(t testing.TB, edit func(*client.Config)) *client.Client {
	t.Helper()
	return c.servers[0].newClient(t, edit)
}

// members returns the member IDs in the table, with the lease each is
// registered under.
func (c *testCluster) members(t testing.TB) map[string]clientv3.LeaseID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.table.Client().Get(ctx, c.table.Prefix()+"/members/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("list members: %v", err)
	}
	out := make(map[string]clientv3.LeaseID, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), c.table.Prefix()+"/members/")] = clientv3.LeaseID(kv.Lease)
	}
	return out
}

// waitMembers waits until the members are exactly the servers srv, each
// registered under a lease that ok accepts (nil: any).
func (c *testCluster) waitMembers(t testing.TB, srv []*cellServer, ok func(id string, lease clientv3.LeaseID) bool, timeout time.Duration) {
	t.Helper()
	want := make([]string, 0, len(srv))
	for _, s := range srv {
		want = append(want, s.id)
	}
	slices.Sort(want)
	deadline := time.Now().Add(timeout)
	var got map[string]clientv3.LeaseID
	for {
		got = c.members(t)
		ids := make([]string, 0, len(got))
		good := true
		for id, lease := range got {
			ids = append(ids, id)
			if ok != nil && !ok(id, lease) {
				good = false
			}
		}
		slices.Sort(ids)
		if good && slices.Equal(ids, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("members %v after %v, want %v", got, timeout, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// status runs cellctl status -w json against the cluster.
func (c *testCluster) status(t *testing.T) statusJSON {
	t.Helper()
	code, out, errs := c.servers[0].cellctl(t, "status", "-w", "json")
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("status: exit %d, %v, stderr %q, stdout %q", code, err, errs, out)
	}
	return st
}

// coordinators returns the servers whose cell_coordinator gauge is 1.
func (c *testCluster) coordinators(t *testing.T) []string {
	t.Helper()
	var ids []string
	for _, s := range c.servers {
		if s.alive() && scrape(t, s).sample("cell_coordinator") == 1 {
			ids = append(ids, s.id)
		}
	}
	return ids
}

// waitOneCoordinator waits until exactly one live server says it is the
// coordinator and the table names it.
func (c *testCluster) waitOneCoordinator(t *testing.T, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ids := c.coordinators(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		id, err := c.table.Coordinator(ctx)
		cancel()
		if len(ids) == 1 && err == nil && id == ids[0] {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("coordinators %v, table says %q (%v), after %v", ids, id, err, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A second and a third server join a running cluster through
// --etcd-endpoints: each registers its region, the root stays on the
// first, and clients see all three.
func TestClusterJoin(t *testing.T) {
	c := startCluster(t, 1, serverOptions{})
	first := c.servers[0]
	cl := c.newClient(t, nil)
	mustPut(t, cl, "before-join", "1")
	c.addServer(t)
	c.addServer(t)
	c.waitMembers(t, c.servers, nil, 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	regions, err := c.table.Regions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]uint32{}
	for _, r := range regions {
		if _, dup := hosts[r.Host]; dup {
			t.Fatalf("%s hosts two regions: %+v", r.Host, regions)
		}
		hosts[r.Host] = r.ID
	}
	for _, s := range c.servers {
		if _, ok := hosts[s.id]; !ok {
			t.Fatalf("no region of %s in %+v", s.id, regions)
		}
	}
	if len(regions) != 3 {
		t.Fatalf("%d regions, want 3: %+v", len(regions), regions)
	}
	root, err := c.table.Root(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if root.Region() != hosts[first.id] {
		t.Fatalf("root %v is not in the first server's region %d", root, hosts[first.id])
	}

	// cellctl sees three servers, each with its region.
	st := c.status(t)
	if len(st.Servers) != 3 {
		t.Fatalf("status lists %d servers, want 3: %+v", len(st.Servers), st)
	}
	for _, s := range st.Servers {
		if s.Error != "" || len(s.Regions) != 1 || s.Regions[0].ID != hosts[s.ID] {
			t.Fatalf("status of %s: %+v", s.ID, s)
		}
	}
	// A new client finds all three; the old one learnt of the newcomers
	// from its watch. Both read and write.
	fresh := c.newClient(t, nil)
	for _, cli := range []*client.Client{cl, fresh} {
		waitFor(t, func() bool { return len(cli.Stats().Selector.Servers) == 3 }, "the client to know three servers", 15*time.Second)
	}
	mustGet(t, fresh, "before-join", "1")
	mustPut(t, fresh, "after-join", "2")
	mustGet(t, cl, "after-join", "2")
	if id := c.waitOneCoordinator(t, 15*time.Second); !slices.ContainsFunc(c.servers, func(s *cellServer) bool { return s.id == id }) {
		t.Fatalf("coordinator %q is not one of the servers", id)
	}
	for _, s := range c.servers {
		if v := scrape(t, s).sample("cell_regions_unavailable"); v != 0 {
			t.Fatalf("%s: cell_regions_unavailable %v with every server up", s.id, v)
		}
	}
}

func waitFor(t testing.TB, cond func() bool, what string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loadPhase is a part of TestEtcdRestart.
type loadPhase int

const (
	phaseBefore loadPhase = iota
	phaseOutage
	phaseAfter
	numPhases
)

var loadPhaseNames = [numPhases]string{"before", "outage", "after"}

func (p loadPhase) String() string { return loadPhaseNames[p] }

// phaseStats count one phase's operations.
type phaseStats struct {
	putOK, putFail, getOK, getFail int
	errs                           map[string]int // error kinds, for the log
}

// loadRecorder is what TestEtcdRestart's load goroutine saw.
type loadRecorder struct {
	mu     sync.Mutex
	phase  loadPhase
	stats  [numPhases]phaseStats
	acked  map[string]string // key → value of every acknowledged put
	maybe  map[string]string // puts with an unknown outcome
	failed []string          // unexpected failures
}

func (r *loadRecorder) setPhase(p loadPhase) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
}

// errKind names an error by the client's sentinels.
func errKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{client.ErrOutcomeUnknown, "outcome-unknown"}, {client.ErrUnavailable, "unavailable"},
		{client.ErrNotFound, "not-found"}, {client.ErrClosed, "closed"},
		{context.DeadlineExceeded, "deadline"}, {context.Canceled, "canceled"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "other: " + err.Error()
}

// run puts key i and reads back a random acknowledged key, over and over,
// until stop is closed.
func (r *loadRecorder) run(c *client.Client, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		key, val := fmt.Sprintf("load-%06d", i), fmt.Sprintf("value-%06d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.Put(ctx, []byte(key), []byte(val))
		cancel()
		r.mu.Lock()
		st := &r.stats[r.phase]
		if st.errs == nil {
			st.errs = map[string]int{}
		}
		switch {
		case err == nil:
			st.putOK++
			r.acked[key] = val
		case errors.Is(err, client.ErrOutcomeUnknown):
			st.putFail++
			st.errs["put "+errKind(err)]++
			r.maybe[key] = val
		default:
			st.putFail++
			st.errs["put "+errKind(err)]++
		}
		// Read back the key written i/2 puts ago (or this one): an
		// acknowledged value must be there.
		rk := fmt.Sprintf("load-%06d", i/2)
		want, acked := r.acked[rk]
		r.mu.Unlock()
		if !acked {
			continue
		}
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		v, err := c.Get(ctx, []byte(rk))
		cancel()
		r.mu.Lock()
		st = &r.stats[r.phase]
		switch {
		case err == nil && string(v) == want:
			st.getOK++
		case err == nil || errors.Is(err, client.ErrNotFound):
			r.failed = append(r.failed, fmt.Sprintf("get %s = %q, %v; want %q (acknowledged)", rk, v, err, want))
			st.getFail++
		default:
			st.getFail++
			st.errs["get "+errKind(err)]++
		}
		r.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
}

// "An etcd restart is survived: servers and clients reconnect and carry
// on." Two servers and a client putting and getting all the time; etcd
// stops for longer than the member lease TTL and comes back on the same
// ports and data directory.
func TestEtcdRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("stops etcd for longer than the lease TTL")
	}
	c := startCluster(t, 2, serverOptions{})
	c.waitMembers(t, c.servers, nil, 30*time.Second)
	oldLeases := c.members(t)
	coord := c.waitOneCoordinator(t, 15*time.Second)
	t.Logf("members %v, coordinator %s", oldLeases, coord)
	cl := c.newClient(t, nil)

	rec := &loadRecorder{acked: map[string]string{}, maybe: map[string]string{}}
	stop := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		rec.run(cl, stop)
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-loadDone
	}()
	okIn := func(p loadPhase) int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.stats[p].putOK + rec.stats[p].getOK
	}
	waitFor(t, func() bool { return okIn(phaseBefore) >= 200 }, "200 operations before the outage", 30*time.Second)

	// The outage: longer than the lease TTL, so that the servers' member
	// leases and campaign sessions run out on their side.
	outage := memberLeaseTTL + 3*time.Second
	rec.setPhase(phaseOutage)
	t.Logf("stopping etcd for %v", outage)
	stopped := time.Now()
	c.etcd.stop() // graceful: etcd drains its streams for up to ~7 s
	t.Logf("etcd stopped in %v", time.Since(stopped).Round(time.Millisecond))
	time.Sleep(outage)
	for _, s := range c.servers {
		if !s.alive() {
			t.Fatalf("%s exited while etcd was down:\n%s", s.id, s.out.String())
		}
	}
	rec.setPhase(phaseAfter)
	c.etcd.restart(t)
	t.Logf("etcd restarted after %v", time.Since(stopped).Round(time.Millisecond))

	// Both servers register again, under new leases (their old ones were
	// given up as lost), without waiting out the old leases that etcd
	// restored with a fresh TTL: they revoke them first.
	restarted := time.Now()
	c.waitMembers(t, c.servers, func(id string, lease clientv3.LeaseID) bool { return lease != oldLeases[id] }, 30*time.Second)
	if d := time.Since(restarted); d >= memberLeaseTTL {
		t.Errorf("servers registered again %v after the restart: the restored old leases were waited out", d)
	} else {
		t.Logf("both servers registered again %v after the restart", d.Round(time.Millisecond))
	}
	coord = c.waitOneCoordinator(t, 30*time.Second)
	t.Logf("coordinator after the restart: %s", coord)

	afterStart := okIn(phaseAfter)
	waitFor(t, func() bool { return okIn(phaseAfter) >= afterStart+200 }, "200 more operations after the restart", 30*time.Second)
	close(stop)
	<-loadDone

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for p := range numPhases {
		st := rec.stats[p]
		t.Logf("%-6s puts %d ok %d failed, gets %d ok %d failed, errors %v", p, st.putOK, st.putFail, st.getOK, st.getFail, st.errs)
	}
	for _, f := range rec.failed {
		t.Error(f)
	}
	// Reads and writes do not need etcd: the outage does not stop them.
	out := rec.stats[phaseOutage]
	if out.putOK == 0 || out.getOK == 0 {
		t.Errorf("no successful puts (%d) or gets (%d) while etcd was down", out.putOK, out.getOK)
	}
	for p := range numPhases {
		if st := rec.stats[p]; st.putFail+st.getFail > 0 {
			t.Errorf("%v: %d puts and %d gets failed: %v", p, st.putFail, st.getFail, st.errs)
		}
	}

	// A new client from the etcd endpoints works and reads every
	// acknowledged write.
	fresh := c.newClient(t, nil)
	for k, v := range rec.acked {
		mustGet(t, fresh, k, v)
	}
	t.Logf("a new client read all %d acknowledged writes", len(rec.acked))
	mustPut(t, fresh, "after-restart", "yes")
	mustGet(t, cl, "after-restart", "yes")
	for k, v := range rec.maybe {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := fresh.Get(ctx, []byte(k))
		cancel()
		if err != nil && !errors.Is(err, client.ErrNotFound) || err == nil && string(got) != v {
			t.Errorf("get %s (outcome unknown) = %q, %v; want %q or not found", k, got, err, v)
		}
	}
}

// sample returns the value of name's sample without labels, -1 if there
// is none.
func (m metrics) sample(name string) float64 {
	for _, line := range m[name] {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			if x, err := strconv.ParseFloat(f[1], 64); err == nil {
				return x
			}
		}
	}
	return -1
}

// The coordinator is elected among the servers: when it is killed (no
// resignation), another takes over once its session lease expires, and
// reports the dead server's region unavailable.
func TestCoordinatorFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a lease TTL")
	}
	c := startCluster(t, 3, serverOptions{cores: 1})
	c.waitMembers(t, c.servers, nil, 30*time.Second)
	id := c.waitOneCoordinator(t, 15*time.Second)
	var dead *cellServer
	for _, s := range c.servers {
		if s.id == id {
			dead = s
		}
	}
	killed := time.Now()
	dead.kill()
	next := c.waitOneCoordinator(t, 3*memberLeaseTTL)
	if next == id {
		t.Fatalf("the killed server %s is still coordinator", id)
	}
	t.Logf("%s took over from the killed %s after %v", next, id, time.Since(killed).Round(time.Millisecond))
	var lead *cellServer
	for _, s := range c.servers {
		if s.id == next {
			lead = s
		}
	}
	waitFor(t, func() bool { return scrape(t, lead).sample("cell_regions_unavailable") == 1 }, "the dead server's region reported unavailable", 3*memberLeaseTTL)
	if !strings.Contains(lead.out.String(), "region unavailable") || !strings.Contains(lead.out.String(), "host="+id+" ") {
		t.Errorf("the coordinator did not log the region of %s:\n%s", id, lead.out.String())
	}
}
