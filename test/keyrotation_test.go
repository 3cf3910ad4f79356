package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
)

// Issue #12, item 3, "One-sided access keys": "Every region registration
// has a random 64-bit key, rotated when the region's leader changes; a
// read with a wrong or old key is refused". Across a real leader change:
// three cellservers, every region replicated three ways, the leadership
// of the root's region (which holds every key: local splits) handed to
// another replica with cellctl transfer-leader, the old leader still
// running as a follower. The region table's tcp and shm keys before and
// after must differ; a raw one-sided read with an old key is refused by
// the old leader (ErrRevoked: it deregistered the key when it stopped
// serving, and both providers remember a revoked key as a tombstone) and
// by the new one (ErrBadKey: it never registered that key); reads with
// the new keys succeed. Go clients in client-side mode that read
// one-sided before the change (so they hold the old keys) keep returning
// the right values after it without an error, each get after a newer
// write acknowledged through the new leader returns that write, never
// the deposed leader's older copy, and they go back to reading
// client-side with the new keys. Two of them see the table through a
// watch that never fires, so that they meet the refusal of their old
// key instead of learning the new one from the table first.
func TestOneSidedKeysRotateWithLeader(t *testing.T) {
	cl := startCluster(t, 3, serverOptions{cores: 1, regionSize: "32MiB", meganodeSize: "1MiB",
		flags: []string{"--replicas", "3", "--raft-heartbeat-timeout", "300ms", "--split-placement", "local", "--balance-interval", "0"}})
	store, err := regiontable.OpenEtcd([]string{cl.etcd.endpoint()}, regiontable.EtcdOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() }) // after the clients using it (cleanups run last first)
	waitReplicated(t, store, 3)
	// Servers and clients share this host: the servers register every
	// region with shm as well as tcp, and the clients read over shm.
	wantSHM := runtime.GOOS == "linux"
	shmProvider := client.ProviderAuto
	if wantSHM {
		// Only shm: a get the client cannot read over shm runs
		// server-side, which the counts of client-side gets below catch.
		shmProvider = client.ProviderSHM
	}

	writer := cl.newClient(t, nil)
	clientSide := func(c *client.Config) { c.Mode = locality.Mode{Kind: locality.ClientOnly} }
	deaf := func(provider string) func(*client.Config) {
		return func(c *client.Config) {
			clientSide(c)
			c.Provider = provider
			c.Endpoints, c.Store = nil, deafWatch{store}
			c.RefreshInterval = -1
		}
	}
	readers := []struct {
		name string
		c    *client.Client
		deaf bool // does not learn of table changes until an operation fails
	}{
		{"auto, table watched", cl.newClient(t, clientSide), false},
		{"shm, no watch", cl.newClient(t, deaf(shmProvider)), true},
		{"tcp, no watch", cl.newClient(t, deaf(client.ProviderTCP)), true},
	}

	const n = 200
	key := func(i int) string { return fmt.Sprintf("keyrot%04d", i) }
	for i := range n {
		mustPut(t, writer, key(i), "before "+key(i))
	}
	for _, r := range readers {
		for i := range n {
			mustGet(t, r.c, key(i), "before "+key(i))
		}
		st := r.c.Stats()
		if st.ClientSideOps["get"] == 0 || st.Reads == 0 {
			t.Fatalf("%s: no get ran client-side before the change: %+v", r.name, st)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, err := store.Root(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, err := store.Region(ctx, root.Region())
	if err != nil {
		t.Fatal(err)
	}
	oldTCP, oldSHM := tableKeys(t, before, wantSHM)
	var to string
	for _, id := range before.Replicas {
		if id != before.Host {
			to = id
			break
		}
	}
	byID := map[string]*cellServer{}
	for _, s := range cl.servers {
		byID[s.id] = s
	}
	oldLeader, newLeader := byID[before.Host], byID[to]
	if oldLeader == nil || newLeader == nil {
		t.Fatalf("region %+v: host or replica %q not among the servers", before, to)
	}
	if oldTCP.Addr != oldLeader.rdma {
		t.Fatalf("tcp key of region %d names responder %s, its host %s listens on %s", before.ID, oldTCP.Addr, oldLeader.id, oldLeader.rdma)
	}
	// A client without a region table (Config.Servers) takes the tcp key
	// from the host's metadata reply: the same one.
	if k := metadataKey(t, oldLeader, before.ID); k != uint64(oldTCP.Key) {
		t.Fatalf("%s's metadata gives region %d the tcp key %#x, the table %v", oldLeader.id, before.ID, k, oldTCP.Key)
	}

	tcpc, err := rdma.NewTCPClient(rdma.TCPClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tcpc.Close()
	var shmc *rdma.SHMClient
	if wantSHM {
		if shmc, err = rdma.NewSHMClient(rdma.SHMClientOptions{}); err != nil {
			t.Fatal(err)
		}
		defer shmc.Close()
	}
	// read reads 1 KiB of the region one-sided with rk (its first
	// meganode's header: any offset inside the region would do).
	read := func(rk rdma.RemoteKey) ([]byte, error) {
		buf := make([]byte, 1024)
		var rc rdma.Client = tcpc
		if rk.Provider == rdma.ProviderSHM {
			rc = shmc
		}
		return buf, rc.Read(ctx, &rk, 4096, buf)
	}
	for _, rk := range []*rdma.RemoteKey{oldTCP, oldSHM} {
		if rk == nil {
			continue
		}
		if _, err := read(*rk); err != nil {
			t.Fatalf("%s read with the current key before the change: %v", rk.Provider, err)
		}
	}

	// The leadership moves; the old leader keeps running, as a follower.
	code, out, errOut := cl.servers[0].cellctl(t, "--command-timeout", "60s", "transfer-leader", fmt.Sprint(before.ID), to)
	if code != 0 {
		t.Fatalf("transfer-leader %d %s: exit %d: %s%s", before.ID, to, code, out, errOut)
	}
	t.Logf("cellctl transfer-leader: %s", strings.TrimSpace(out))
	after, err := store.Region(ctx, before.ID)
	if err != nil || after.Host != to || after.Term <= before.Term {
		t.Fatalf("after transfer-leader to %s: %+v (%v); before %+v", to, after, err, before)
	}
	if !oldLeader.alive() || !slices.Contains(after.Replicas, oldLeader.id) {
		t.Fatalf("the old leader %s is gone: alive %v, replicas %v", oldLeader.id, oldLeader.alive(), after.Replicas)
	}
	// moved reports whether the region's entry moved on from after (a
	// leader change the test did not ask for: on a starved host raft can
	// elect again). The new keys are then no longer current, and the
	// checks that they work are not made.
	moved := func() bool {
		e, err := store.Region(ctx, after.ID)
		if err != nil {
			t.Fatal(err)
		}
		if e.Epoch != after.Epoch {
			t.Logf("region %d moved on again (host %s, epoch %d; after the transfer %s, %d): its newest keys are not the ones checked", e.ID, e.Host, e.Epoch, after.Host, after.Epoch)
			return true
		}
		return false
	}

	newTCP, newSHM := tableKeys(t, after, wantSHM)
	if newTCP.Addr != newLeader.rdma {
		t.Fatalf("new tcp key names responder %s, the new leader %s listens on %s", newTCP.Addr, newLeader.id, newLeader.rdma)
	}
	if k := metadataKey(t, oldLeader, before.ID); k == uint64(oldTCP.Key) {
		t.Errorf("the old leader's metadata still gives region %d its old tcp key %#x", before.ID, k)
	}
	if k := metadataKey(t, newLeader, before.ID); k != uint64(newTCP.Key) && !moved() {
		t.Errorf("the new leader's metadata gives region %d the tcp key %#x, the table %v", before.ID, k, newTCP.Key)
	}

	type keyPair struct{ old, new *rdma.RemoteKey }
	for _, p := range []keyPair{{oldTCP, newTCP}, {oldSHM, newSHM}} {
		if p.old == nil {
			continue
		}
		prov := p.old.Provider
		if p.new.Key == p.old.Key {
			t.Errorf("%s: the new leader's key is the old leader's, %v", prov, p.old.Key)
		}
		// The old key where it was registered: revoked.
		if _, err := read(*p.old); !errors.Is(err, rdma.ErrRevoked) {
			t.Errorf("%s read with the old key from the old leader %s: %v, want %v", prov, oldLeader.id, err, rdma.ErrRevoked)
		}
		// The old key at the new leader (its responder; its shm table,
		// slot and region file): never registered there.
		stale := *p.new
		stale.Key = p.old.Key
		if _, err := read(stale); !errors.Is(err, rdma.ErrBadKey) {
			t.Errorf("%s read with the old key from the new leader %s: %v, want %v", prov, newLeader.id, err, rdma.ErrBadKey)
		}
		// A new key at the old leader: never registered there either.
		if prov == rdma.ProviderTCP {
			wrongHost := *p.new
			wrongHost.Addr = oldLeader.rdma
			if _, err := read(wrongHost); !errors.Is(err, rdma.ErrBadKey) {
				t.Errorf("tcp read with the new key from the old leader: %v, want %v", err, rdma.ErrBadKey)
			}
		}
		if _, err := read(*p.new); err != nil && !moved() {
			t.Errorf("%s read with the new key from the new leader: %v", prov, err)
		}
	}
	if newSHM != nil {
		// Both of the new leader's registrations expose the same memory.
		a, errA := read(*newTCP)
		b, errB := read(*newSHM)
		if (errA != nil || errB != nil || !bytes.Equal(a, b)) && !moved() {
			t.Errorf("the new leader's tcp and shm registrations read differently (%v, %v)", errA, errB)
		}
	}

	// Each key gets a newer value, acknowledged through the new leader;
	// every reader returns it at once.
	failedBefore := make([]uint64, len(readers))
	for j, r := range readers {
		st := r.c.Stats()
		failedBefore[j] = st.Retry("read-failed")
	}
	for i := range n {
		v := fmt.Sprintf("after %s", key(i))
		mustPut(t, writer, key(i), v)
		for _, r := range readers {
			mustGet(t, r.c, key(i), v)
		}
	}
	for j, r := range readers {
		st := r.c.Stats()
		t.Logf("%s: %d gets, %d client-side, %d one-sided reads, retries %v", r.name, st.Ops["get"], st.ClientSideOps["get"], st.Reads, st.Retries)
		if r.deaf && st.Retry("read-failed") == failedBefore[j] {
			t.Errorf("%s: no one-sided read was refused after the change: it did not read with its old key", r.name)
		}
		if st.Errors["get"] != 0 {
			t.Errorf("%s: %d gets failed", r.name, st.Errors["get"])
		}
	}

	// The readers went back to one-sided reads, with the new keys: a
	// round of gets runs client-side, with no read refused.
	for _, r := range readers {
		before := r.c.Stats()
		for i := range n {
			mustGet(t, r.c, key(i), "after "+key(i))
		}
		st := r.c.Stats()
		if moved() {
			continue
		}
		if got := st.ClientSideOps["get"] - before.ClientSideOps["get"]; got != n {
			t.Errorf("%s: %d of %d gets ran client-side after the change", r.name, got, n)
		}
		if st.Retry("read-failed") != before.Retry("read-failed") {
			t.Errorf("%s: one-sided reads still refused after the change: %v", r.name, st.Retries)
		}
	}
}

// tableKeys returns region r's tcp and shm remote keys from its table
// entry (shm nil unless want).
func tableKeys(t *testing.T, r regiontable.Region, wantSHM bool) (tcp, shm *rdma.RemoteKey) {
	t.Helper()
	get := func(provider string) *rdma.RemoteKey {
		raw, ok := r.ReadKeyFor(provider)
		if !ok {
			t.Fatalf("region %d has no %s key: %+v", r.ID, provider, r)
		}
		var rk rdma.RemoteKey
		if err := json.Unmarshal(raw, &rk); err != nil || rk.Region != r.ID || rk.Key == 0 {
			t.Fatalf("region %d's %s key %s: %+v, %v", r.ID, provider, raw, rk, err)
		}
		return &rk
	}
	tcp = get(rdma.ProviderTCP)
	if wantSHM {
		shm = get(rdma.ProviderSHM)
	}
	return tcp, shm
}

// deafWatch is a region table whose watch never reports a change: a
// client on it learns that the table changed only when an operation
// fails (a redirect, a refused one-sided read) and it reloads the table.
type deafWatch struct{ regiontable.Store }

func (deafWatch) Watch(ctx context.Context, _ int64) <-chan regiontable.Event {
	ch := make(chan regiontable.Event)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}

// metadataKey is the tcp key the server's metadata reply gives region id,
// 0 if it describes no such region.
func metadataKey(t *testing.T, s *cellServer, id uint32) uint64 {
	t.Helper()
	for _, ri := range metadata(t, s).Regions {
		if ri.ID == id {
			return ri.RemoteKey
		}
	}
	return 0
}
