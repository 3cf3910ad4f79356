package server

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// tcpLayer is a raft.StreamLayer over a plain loopback listener.
type tcpLayer struct{ net.Listener }

func (l tcpLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

type fixedAddr raft.ServerAddress

func (a fixedAddr) ServerAddr(raft.ServerID) (raft.ServerAddress, error) {
	return raft.ServerAddress(a), nil
}

// TestRaftTransportDoesNotPipeline checks that the groups' transports
// refuse pipelined replication, so that raft replicates with one
// AppendEntries in flight per follower (newRaftTransport says why: the
// library's pipeline can deadlock a leader's replication and Shutdown).
func TestRaftTransportDoesNotPipeline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trans := newRaftTransport(tcpLayer{ln}, hclog.NewNullLogger(), fixedAddr(ln.Addr().String()))
	defer trans.Close()
	p, err := trans.AppendEntriesPipeline("peer", raft.ServerAddress(ln.Addr().String()))
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		if p != nil {
			_ = p.Close()
		}
		t.Fatalf("AppendEntriesPipeline: %v, want ErrPipelineReplicationNotSupported", err)
	}
}

// A leader steps down after half a heartbeat timeout without a quorum
// (raft's default ratio; it was a fixed 100 ms, which a loaded host's
// followers exceeded now and then), and the short timeouts a sole voter
// elects itself with still pass raft's validation (the lease timeout must
// not exceed the heartbeat timeout), whatever the heartbeat timeout.
func TestLeaderLeaseTimeout(t *testing.T) {
	for _, hb := range []time.Duration{20 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second} {
		s := &Server{opts: Options{ServerID: "s", RaftHeartbeatTimeout: hb, SnapshotInterval: DefaultSnapshotInterval, SnapshotThreshold: DefaultSnapshotThreshold}}
		c := s.raftConfig()
		if c.LeaderLeaseTimeout != hb/2 {
			t.Errorf("heartbeat %v: leader lease timeout %v, want %v", hb, c.LeaderLeaseTimeout, hb/2)
		}
		if err := raft.ValidateConfig(c); err != nil {
			t.Errorf("heartbeat %v: %v", hb, err)
		}
		c.HeartbeatTimeout, c.ElectionTimeout = s.soleVoterTimeout(), s.soleVoterTimeout()
		if err := raft.ValidateConfig(c); err != nil {
			t.Errorf("heartbeat %v, a sole voter's timeouts %v: %v", hb, s.soleVoterTimeout(), err)
		}
		if s.soleVoterTimeout() > max(hb/2, minSoleVoterTimeout) {
			t.Errorf("heartbeat %v: a sole voter waits %v", hb, s.soleVoterTimeout())
		}
	}
}
