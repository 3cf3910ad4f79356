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
