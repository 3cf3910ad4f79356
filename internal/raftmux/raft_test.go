package raftmux

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// listFSM records the commands it applies, in order.
type listFSM struct {
	mu      sync.Mutex
	applied []string
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, string(l.Data))
	return len(f.applied)
}

func (f *listFSM) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.applied)
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) { return listSnap(f.list()), nil }

func (f *listFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	var l []string
	if len(b) > 0 {
		l = strings.Split(string(b), "\n")
	}
	f.mu.Lock()
	f.applied = l
	f.mu.Unlock()
	return nil
}

type listSnap []string

func (s listSnap) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write([]byte(strings.Join(s, "\n"))); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (listSnap) Release() {}

// replica is one server's member of one region's raft group.
type replica struct {
	node  int
	addr  string // the mux's address: the raft ServerAddress
	raft  *raft.Raft
	fsm   *listFSM
	trans *raft.NetworkTransport
}

// cluster is a set of servers, each with one Mux, hosting the same regions:
// one raft group of len(muxes) voters per region.
type cluster struct {
	muxes    []*Mux
	replicas map[uint32][]*replica
}

// startCluster starts n muxes hosting every region in regions, all raft
// groups bootstrapped with the n muxes as voters, over the muxes only.
func startCluster(t *testing.T, n int, regions []uint32, opts Options) *cluster {
	t.Helper()
	c := &cluster{replicas: map[uint32][]*replica{}}
	for range n {
		c.muxes = append(c.muxes, mustListen(t, opts))
	}
	var servers []raft.Server
	for i, m := range c.muxes {
		servers = append(servers, raft.Server{ID: serverID(i), Address: raft.ServerAddress(m.Addr().String())})
	}
	// Every group first, so that no raft dials a region not open yet.
	layers := map[uint32][]*Group{}
	for _, region := range regions {
		for _, m := range c.muxes {
			layers[region] = append(layers[region], mustGroup(t, m, region))
		}
	}
	for _, region := range regions {
		for i, m := range c.muxes {
			layer := layers[region][i]
			trans := raft.NewNetworkTransport(layer, 3, 2*time.Second, testWriter(t))
			conf := raft.DefaultConfig()
			conf.LocalID = serverID(i)
			conf.HeartbeatTimeout = 150 * time.Millisecond
			conf.ElectionTimeout = 150 * time.Millisecond
			conf.LeaderLeaseTimeout = 100 * time.Millisecond
			conf.CommitTimeout = 5 * time.Millisecond
			conf.SnapshotThreshold = 1 << 40
			conf.LogOutput = testWriter(t)
			conf.LogLevel = "WARN"
			logs, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
			if err := raft.BootstrapCluster(conf, logs, logs, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
				t.Fatalf("region %d node %d: BootstrapCluster: %v", region, i, err)
			}
			fsm := &listFSM{}
			r, err := raft.NewRaft(conf, fsm, logs, logs, snaps, trans)
			if err != nil {
				t.Fatalf("region %d node %d: NewRaft: %v", region, i, err)
			}
			rep := &replica{node: i, addr: m.Addr().String(), raft: r, fsm: fsm, trans: trans}
			c.replicas[region] = append(c.replicas[region], rep)
			t.Cleanup(func() { // runs before the mux's cleanup (registered earlier)
				if err := r.Shutdown().Error(); err != nil {
					t.Errorf("region %d node %d: Shutdown: %v", region, i, err)
				}
				_ = trans.Close()
			})
		}
	}
	return c
}

func serverID(i int) raft.ServerID { return raft.ServerID(fmt.Sprintf("s%d", i)) }

// leader waits until some replica of region, other than the excluded ones,
// is leader and returns it.
func (c *cluster) leader(t *testing.T, region uint32, exclude ...*replica) *replica {
	t.Helper()
	var l *replica
	waitFor(t, fmt.Sprintf("a leader of region %d", region), func() bool {
		for _, r := range c.replicas[region] {
			if r.raft.State() == raft.Leader && !slices.Contains(exclude, r) {
				l = r
				return true
			}
		}
		return false
	})
	return l
}

// apply commits cmd in region through whichever replica (not excluded)
// leads, retrying while leadership moves. A retried command may commit
// twice (its first outcome was unknown); the checks allow for that.
func (c *cluster) apply(t *testing.T, region uint32, cmd string, exclude ...*replica) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		l := c.leader(t, region, exclude...)
		err := l.raft.Apply([]byte(cmd), patience).Error()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("region %d: Apply(%q): %v", region, cmd, err)
		}
	}
}

// waitApplied waits until each of reps has applied every command in want
// and all of them have applied the same list.
func waitApplied(t *testing.T, what string, reps []*replica, want []string) {
	t.Helper()
	waitFor(t, what, func() bool {
		first := reps[0].fsm.list()
		for _, w := range want {
			if !slices.Contains(first, w) {
				return false
			}
		}
		for _, r := range reps[1:] {
			if !slices.Equal(r.fsm.list(), first) {
				return false
			}
		}
		return true
	})
}

func cmds(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// applyAll applies cmds to every region concurrently, region by region in
// order, and waits until every replica has them.
func (c *cluster) applyAll(t *testing.T, regions []uint32, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for _, region := range regions {
		wg.Go(func() {
			for _, cmd := range cmds(fmt.Sprintf("%s-r%d", prefix, region), n) {
				c.apply(t, region, cmd)
			}
		})
	}
	wg.Wait()
	for _, region := range regions {
		waitApplied(t, fmt.Sprintf("region %d to replicate %s", region, prefix), c.replicas[region],
			cmds(fmt.Sprintf("%s-r%d", prefix, region), n))
	}
}

// TestTwoRaftClustersOverThreeMuxes: three servers, each one Mux hosting
// regions 1 and 2: two raft groups of three voters run at once over the
// same three listeners, elect leaders and replicate.
func TestTwoRaftClustersOverThreeMuxes(t *testing.T) {
	regions := []uint32{1, 2}
	c := startCluster(t, 3, regions, Options{})
	c.applyAll(t, regions, "x", 20)
	for _, region := range regions {
		for _, r := range c.replicas[region] {
			for _, cmd := range r.fsm.list() {
				if !strings.HasPrefix(cmd, fmt.Sprintf("x-r%d-", region)) {
					t.Fatalf("region %d node %d applied %q: another region's command", region, r.node, cmd)
				}
			}
		}
	}
	for i, m := range c.muxes {
		s := m.Stats()
		if len(s.Rejected) != 0 {
			t.Errorf("mux %d rejected %v", i, s.Rejected)
		}
		for _, region := range regions {
			if s.Accepted[region] == 0 && s.Dialed[region] == 0 {
				t.Errorf("mux %d carried no traffic of region %d: %+v", i, region, s)
			}
		}
	}
}

// TestIsolateLeader (raft §5.2, §5.4): a leader cut off from its
// followers by the network cannot commit; the other two elect a new
// leader and go on; after healing, the old leader follows and its state
// machine catches up, without the entry it could not commit.
func TestIsolateLeader(t *testing.T) {
	const seed = 42
	t.Logf("FaultNet seed %d", seed)
	f := NewFaultNet(seed)
	c := startCluster(t, 3, []uint32{1}, Options{Faults: f})
	reps := c.replicas[1]
	c.applyAll(t, []uint32{1}, "before", 5)

	old := c.leader(t, 1)
	oldTerm := old.raft.CurrentTerm()
	f.Isolate(old.addr)
	t.Logf("isolated the leader, node %d (%s)", old.node, old.addr)

	// Whatever the old leader accepts now cannot commit: it fails when it
	// steps down for want of a quorum (ErrLeadershipLost), or at once if
	// it already has (ErrNotLeader).
	fut := old.raft.Apply([]byte("lost"), patience)
	errc := make(chan error, 1)
	go func() { errc <- fut.Error() }()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("the isolated leader committed an entry")
		}
		if !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrNotLeader) {
			t.Fatalf("isolated leader's Apply: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("the isolated leader's Apply neither failed nor committed")
	}

	var majority []*replica
	for _, r := range reps {
		if r != old {
			majority = append(majority, r)
		}
	}
	nl := c.leader(t, 1, old)
	t.Logf("new leader: node %d", nl.node)
	for _, cmd := range cmds("during", 5) {
		c.apply(t, 1, cmd, old)
	}
	waitApplied(t, "the majority to apply the entries of the new term", majority, cmds("during", 5))
	if got := old.fsm.list(); slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "during") }) {
		t.Fatalf("the isolated node applied %v", got)
	}

	f.Heal()
	c.apply(t, 1, "after")
	waitApplied(t, "the old leader to catch up", reps, append(append(cmds("before-r1", 5), cmds("during", 5)...), "after"))
	for _, r := range reps {
		if slices.Contains(r.fsm.list(), "lost") {
			t.Fatalf("node %d applied the entry the isolated leader could not commit", r.node)
		}
	}
	// It learnt of a later term and of its leader (normally the new
	// leader; in principle a later election may have picked anyone).
	waitFor(t, "the old leader to know the new term's leader", func() bool {
		_, id := old.raft.LeaderWithID()
		return old.raft.CurrentTerm() > oldTerm && id != ""
	})
}

// TestHostilePeersWhileClustersRun: garbage, wrong magic, wrong version,
// unknown regions and half-sent headers against one mux neither stop it
// nor slow the two raft groups it carries; Stats say what was rejected.
func TestHostilePeersWhileClustersRun(t *testing.T) {
	regions := []uint32{1, 2}
	c := startCluster(t, 3, regions, Options{HandshakeTimeout: 2 * time.Second})
	c.applyAll(t, regions, "warmup", 3)
	m := c.muxes[0]

	const stalls = 20
	good := appendHeader(nil, header{version: protoVersion, region: 1})
	for i := range stalls { // half a header each, then silence
		cn := rawDial(t, m)
		if _, err := cn.Write(good[:i%headerSize]); err != nil {
			t.Fatal(err)
		}
	}
	badCRC := bytes.Clone(good)
	badCRC[offCRC] ^= 0xff
	for _, b := range [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: cell\r\n\r\n"), // bad magic
		bytes.Repeat([]byte{0xff}, 64),                 // bad magic
		appendHeader(nil, header{version: 9, region: 1}),
		appendHeader(nil, header{version: protoVersion, region: 77}),
		badCRC,
	} {
		cn := rawDial(t, m)
		if _, err := cn.Write(b); err != nil {
			t.Fatal(err)
		}
		readUntilClosed(t, cn)
	}
	// A real header then nothing: raft's transport gets an idle
	// connection, which costs it nothing.
	idle := rawDial(t, m)
	if _, err := idle.Write(appendHeader(nil, header{version: protoVersion, region: 2})); err != nil {
		t.Fatal(err)
	}

	// The stalled handshakes are still pending or timing out meanwhile.
	// Drop every raft connection, so that the groups must dial mux 0
	// afresh, and check both go on.
	for _, region := range regions {
		for _, r := range c.replicas[region] {
			r.trans.CloseStreams()
		}
	}
	c.applyAll(t, regions, "under-attack", 10)
	// And mux 0 accepts new connections of both regions (raft might not
	// need any: a leader only dials).
	for _, region := range regions {
		cn, err := c.muxes[1].group(region).Dial(raft.ServerAddress(m.Addr().String()), patience)
		if err != nil {
			t.Fatalf("region %d: Dial of the attacked mux: %v", region, err)
		}
		_ = cn.Close()
	}

	waitFor(t, "the stalled handshakes to time out", func() bool {
		return m.Stats().Rejected[RejectTimeout] >= stalls
	})
	s := m.Stats()
	want := map[Reject]uint64{RejectBadMagic: 2, RejectBadVersion: 1, RejectUnknownRegion: 1, RejectBadHeader: 1}
	for why, n := range want {
		if s.Rejected[why] != n {
			t.Errorf("rejected for %s: %d, want %d (all: %v)", why, s.Rejected[why], n, s.Rejected)
		}
	}
	for _, region := range regions {
		if s.Accepted[region] == 0 {
			t.Errorf("region %d: nothing accepted: %+v", region, s)
		}
	}
	waitFor(t, "no pending handshakes", func() bool { return m.Stats().Pending == 0 })
	c.applyAll(t, regions, "after-attack", 3)
}
