package raftmux

import (
	"context"
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

// Two muxes over one MemNetwork talk as over TCP: a dial reaches the
// other's group through the handshake and echoes; a dial to an address
// nobody listens on, or to a closed mux, is refused at once; two muxes
// cannot listen at one address.
func TestMemNetwork(t *testing.T) {
	net := &MemNetwork{}
	a := mustListen(t, Options{Network: net, AdvertiseAddr: ""})
	b := mustListen(t, Options{Network: net})
	if a.Addr().String() == b.Addr().String() {
		t.Fatalf("two muxes at %s", a.Addr())
	}
	echoAll(mustGroup(t, b, 7))
	ga := mustGroup(t, a, 7)
	c, err := ga.Dial(raft.ServerAddress(b.Addr().String()), patience)
	if err != nil {
		t.Fatalf("Dial over the memory network: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo: %q, %v", got, err)
	}

	if _, err := net.DialContext(context.Background(), "127.0.0.1:1"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial of nobody: %v, want ECONNREFUSED", err)
	}
	if _, err := net.Listen(b.Addr().String()); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("listen at a taken address: %v, want EADDRINUSE", err)
	}
	addr := b.Addr().String()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ga.Dial(raft.ServerAddress(addr), patience); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial of a closed mux: %v, want ECONNREFUSED", err)
	}
}
