package raftmux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// faultPair is two muxes sharing a FaultNet, each with an echoing group for
// regions 1 and 2.
type faultPair struct {
	f    *FaultNet
	a, b *Mux
}

func newFaultPair(t *testing.T) faultPair {
	f := NewFaultNet(1)
	p := faultPair{f: f, a: mustListen(t, Options{Faults: f}), b: mustListen(t, Options{Faults: f})}
	for _, m := range []*Mux{p.a, p.b} {
		for _, r := range []uint32{1, 2} {
			echoAll(mustGroup(t, m, r))
		}
	}
	return p
}

func (p faultPair) dial(from, to *Mux, region uint32) (net.Conn, error) {
	return from.group(region).Dial(raft.ServerAddress(to.Addr().String()), patience)
}

func (p faultPair) mustDial(t *testing.T, from, to *Mux, region uint32) net.Conn {
	t.Helper()
	c, err := p.dial(from, to, region)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestFaultNetIsolate: isolating a node fails its new dials both ways, and
// its established connections (dialed by it or by the peer) stop
// delivering at once; Heal lets new connections through.
func TestFaultNetIsolate(t *testing.T) {
	p := newFaultPair(t)
	a, b := p.a.Addr().String(), p.b.Addr().String()
	out := p.mustDial(t, p.a, p.b, 1) // dialed by the node we isolate
	in := p.mustDial(t, p.b, p.a, 2)  // dialed by its peer
	mustRoundTrip(t, out, "out")
	mustRoundTrip(t, in, "in")
	if got := p.f.Conns(); got != 2 {
		t.Fatalf("FaultNet tracks %d connections, want 2", got)
	}

	p.f.Isolate(a)
	if p.f.Allowed(a, b, 1) || p.f.Allowed(b, a, 1) {
		t.Fatal("Allowed across the cut")
	}
	for name, c := range map[string]net.Conn{"out": out, "in": in} {
		if _, err := c.Write([]byte("x")); err == nil {
			t.Errorf("%s: Write across the cut succeeded", name)
		}
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("%s: Read across the cut succeeded", name)
		}
	}
	if _, err := p.dial(p.a, p.b, 1); !errors.Is(err, ErrPartitioned) {
		t.Fatalf("Dial from the isolated node = %v, want ErrPartitioned", err)
	}
	if _, err := p.dial(p.b, p.a, 1); !errors.Is(err, ErrPartitioned) {
		t.Fatalf("Dial to the isolated node = %v, want ErrPartitioned", err)
	}
	if got := p.f.Conns(); got != 0 {
		t.Fatalf("FaultNet tracks %d connections after the cut, want 0", got)
	}

	p.f.Heal()
	mustRoundTrip(t, p.mustDial(t, p.a, p.b, 1), "healed out")
	mustRoundTrip(t, p.mustDial(t, p.b, p.a, 2), "healed in")
}

// TestFaultNetPartition: partitions accumulate, and nodes on the same side
// still talk.
func TestFaultNetPartition(t *testing.T) {
	f := NewFaultNet(1)
	f.Partition("a", "b")
	f.Partition("c")
	for _, tc := range []struct {
		from, to string
		want     bool
	}{
		{"a", "b", true}, {"b", "a", true}, {"a", "c", false}, {"c", "b", false},
		{"a", "d", false}, {"c", "d", false}, {"d", "e", true}, {"a", "a", true},
	} {
		if got := f.Allowed(tc.from, tc.to, 1); got != tc.want {
			t.Errorf("Allowed(%s, %s) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
	f.Heal()
	if !f.Allowed("a", "c", 1) {
		t.Error("Heal left a cut")
	}
}

// TestFaultNetFilter: a filter cuts one region's traffic, one direction,
// and existing connections it now refuses are closed.
func TestFaultNetFilter(t *testing.T) {
	p := newFaultPair(t)
	a := p.a.Addr().String()
	r1 := p.mustDial(t, p.a, p.b, 1)
	r2 := p.mustDial(t, p.a, p.b, 2)
	p.f.SetFilter(func(l Link) error {
		if l.Region == 2 && l.To == a {
			return fmt.Errorf("%w: region 2 into a", ErrPartitioned)
		}
		return nil
	})
	mustRoundTrip(t, r1, "region 1 still flows")
	if _, err := r2.Read(make([]byte, 1)); err == nil {
		t.Fatal("region 2 connection survived the filter")
	}
	if _, err := p.dial(p.b, p.a, 2); !errors.Is(err, ErrPartitioned) {
		t.Fatalf("Dial b->a region 2 = %v, want ErrPartitioned", err)
	}
	mustRoundTrip(t, p.mustDial(t, p.b, p.a, 1), "b->a region 1")
	p.f.SetFilter(nil)
	mustRoundTrip(t, p.mustDial(t, p.a, p.b, 2), "region 2 after the filter")
}

// TestFaultNetDrop: with drop rate 1 every Write tears its message and
// closes the connection; the peer gets at most a prefix.
func TestFaultNetDrop(t *testing.T) {
	f := NewFaultNet(7)
	a, b := mustListen(t, Options{Faults: f}), mustListen(t, Options{})
	mustGroup(t, a, 1)
	acc := acceptAll(mustGroup(t, b, 1))
	c, err := a.group(1).Dial(raft.ServerAddress(b.Addr().String()), patience)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := <-acc
	defer peer.Close()

	f.SetDropRate(1)
	msg := []byte("a message that will be torn somewhere")
	n, err := c.Write(msg)
	if !errors.Is(err, ErrDropped) || n >= len(msg) {
		t.Fatalf("Write = %d, %v; want a short count and ErrDropped", n, err)
	}
	got := readUntilClosed(t, peer)
	if len(got) != n || string(got) != string(msg[:n]) {
		t.Fatalf("peer read %q, want the %d-byte prefix", got, n)
	}
	if _, err := c.Write(msg); err == nil {
		t.Fatal("Write after a drop succeeded")
	}

	f.SetDropRate(0)
	c2, err := a.group(1).Dial(raft.ServerAddress(b.Addr().String()), patience)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	p2 := <-acc
	echo(p2)
	mustRoundTrip(t, c2, "no drops now")
}

// TestFaultNetDelay: a delay holds a Write back until it ends or the
// connection closes, and a Dial whose delay outlasts its timeout fails.
// (No timing is asserted: the delay is an hour.)
func TestFaultNetDelay(t *testing.T) {
	f := NewFaultNet(1)
	a, b := mustListen(t, Options{Faults: f}), mustListen(t, Options{})
	mustGroup(t, a, 1)
	echoAll(mustGroup(t, b, 1))
	to := raft.ServerAddress(b.Addr().String())
	c, err := a.group(1).Dial(to, patience)
	if err != nil {
		t.Fatal(err)
	}
	f.SetDelay(time.Hour)
	done := make(chan error, 1)
	go func() {
		_, err := c.Write([]byte("slow"))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Write under a one-hour delay returned %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	_ = c.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("delayed Write after Close = %v, want net.ErrClosed", err)
	}
	if _, err := a.group(1).Dial(to, 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial under a one-hour delay = %v, want context.DeadlineExceeded", err)
	}
	f.SetDelay(0)
	c2, err := a.group(1).Dial(to, patience)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	mustRoundTrip(t, c2, "fast again")
}
