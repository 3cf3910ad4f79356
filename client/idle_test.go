package client

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// blackhole accepts connections and reads them without ever answering,
// as a paused server does, or a killed container whose address drops
// packets.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = nc.Close() })
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := nc.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// A request waiting on a server that stopped answering fails as soon as
// the region table shows that server hosting no region (its regions were
// taken over), not at its deadline: the client closes its connections to
// servers that host nothing, and leaves them out of its refreshes.
func TestIdleServerConnectionsClosed(t *testing.T) {
	rc := startReal(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bh := blackhole(t)
	reg, err := rc.store.RegisterMember(ctx, regiontable.Member{ID: "stalled", RPCAddr: bh, ReadAddr: bh, HostID: "elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())
	// Region 77 is the stalled server's (it holds nothing any client
	// reads; what matters is that it hosts a region).
	if err := rc.store.PutRegion(ctx, regiontable.Region{ID: 77, Kind: regiontable.KindData, Size: 1 << 20, Host: "stalled", Epoch: 1, Term: 1}); err != nil {
		t.Fatal(err)
	}
	cfg := realConfig(t, rc)
	cfg.DialTimeout = 2 * time.Second // the first refresh gives up on the stalled server after it
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// A request to the stalled server waits ...
	done := make(chan error, 1)
	go func() {
		f, err := c.serverFor(bh).call(ctx, wire.OpPing, nil)
		if err == nil {
			f.Release()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a request to a server that never answers returned: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	// ... until its region is taken over by another host.
	start := time.Now()
	if err := rc.store.PutRegion(ctx, regiontable.Region{ID: 77, Kind: regiontable.KindData, Size: 1 << 20, Host: "s1", Epoch: 2, Term: 2}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ce *wire.ConnError
		if !errors.As(err, &ce) {
			t.Fatalf("the waiting request failed with %v, want a lost connection", err)
		}
		t.Logf("the waiting request failed %v after the takeover was published: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(5 * time.Second):
		t.Fatal("the request to the stalled server still waits 5 s after its region was taken over")
	}
}
