package server

import (
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/wire"
	"github.com/cellstore/cell/wire/wiretest"
)

// dialFrom opens a raw connection to s from local address ip (any
// 127.0.0.0/8 address is loopback), closed at cleanup.
func dialFrom(t *testing.T, s *Server, ip string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return nc
}

// claimFrame is the start of a put whose header claims a body of claim
// bytes, followed by sent bytes of it.
func claimFrame(claim, sent int) []byte {
	b := wire.AppendFrame(nil, wire.Header{Op: wire.OpPut, ID: 1}, make([]byte, sent))
	binary.LittleEndian.PutUint32(b, uint32(wire.HeaderSize+claim))
	return b
}

func refusals(t *testing.T, s *Server, reason string) float64 {
	t.Helper()
	return metricValue(gather(t, s), "cell_server_refusals_total", map[string]string{"reason": reason})
}

// TestStalledLargeFramesBoundHeap: 200 connections each send a header
// claiming the largest frame and 4 KiB of it, then stall. The server's
// heap stays small (it grew each body by what arrived, not by the claim),
// and a normal client's gets go on meanwhile.
func TestStalledLargeFramesBoundHeap(t *testing.T) {
	s, _ := newTestServer(t)
	c := dial(t, s)
	put(t, c, "keep", "me")
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	frame := claimFrame(wire.DefaultMaxBody, 4<<10)
	for range 200 {
		nc := dialFrom(t, s, "127.0.0.1")
		if _, err := nc.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 {
		if v, ok := get(t, c, "keep"); !ok || v != "me" {
			t.Fatalf("keep = %q, %v beside stalled connections", v, ok)
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	const bound = 64 << 20
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > bound || after.HeapAlloc > bound {
		t.Fatalf("200 stalled 4 MiB claims: %d MiB allocated, heap %d MiB; want both under %d MiB",
			alloc>>20, after.HeapAlloc>>20, bound>>20)
	}
}

// TestIdleAndSlowConnectionsClosed: a connection idle past the idle
// timeout is closed, and one that started a frame and stalled is closed
// after the frame timeout, both counted; the server goes on.
func TestIdleAndSlowConnectionsClosed(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) {
		o.IdleTimeout = 300 * time.Millisecond
		o.FrameTimeout = 100 * time.Millisecond
	})
	idle := wiretest.Dial(t, s.Addr())
	idle.Ping(1)
	slow := wiretest.Dial(t, s.Addr())
	slow.Send(claimFrame(100, 10)[:HeaderSizeHalf])
	slowBody := wiretest.Dial(t, s.Addr())
	slowBody.Send(claimFrame(wire.DefaultMaxBody, 4<<10))
	for name, c := range map[string]*wiretest.Conn{"idle": idle, "stalled in a header": slow, "stalled in a body": slowBody} {
		if !c.Closed() {
			t.Errorf("%s connection: not closed", name)
		}
	}
	if v := refusals(t, s, refuseIdle); v < 1 {
		t.Errorf("idle timeouts counted %v, want 1", v)
	}
	if v := refusals(t, s, refuseSlow); v != 2 {
		t.Errorf("frame timeouts counted %v, want 2", v)
	}
	fam := gather(t, s)
	if v := metricValue(fam, "cell_server_connections_closed_total", map[string]string{"reason": closeIdle}); v < 1 {
		t.Errorf("connections closed idle: %v, want 1", v)
	}
	wiretest.Dial(t, s.Addr()).Ping(2)
}

// HeaderSizeHalf cuts a frame inside its header.
const HeaderSizeHalf = wire.HeaderSize / 2

// TestClientAcrossIdleClose: the client's pooled connections are closed
// by the server's idle timeout between two gets; the second get succeeds
// all the same (the client redials).
func TestClientAcrossIdleClose(t *testing.T) {
	s, store := newTestServer(t, func(o *Options) { o.IdleTimeout = 200 * time.Millisecond })
	c := newClient(t, store, "server")
	ctx := ctxT(t)
	if err := c.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		before := refusals(t, s, refuseIdle)
		// Wait until the server closed the client's idle connections.
		deadline := time.Now().Add(10 * time.Second)
		for refusals(t, s, refuseIdle) == before {
			if time.Now().After(deadline) {
				t.Fatal("the client's connections were not closed for idleness")
			}
			time.Sleep(50 * time.Millisecond)
		}
		v, err := c.Get(ctx, []byte("k"))
		if err != nil || string(v) != "v" {
			t.Fatalf("get %d after the idle close: %q, %v", i, v, err)
		}
	}
}

// TestConnectionLimits: beyond MaxConnectionsPerHost from one address,
// and beyond MaxConnections in all, a connection is refused (a refusal
// frame, then closed) and counted; the open ones are unaffected.
func TestConnectionLimits(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) {
		o.MaxConnections = 4
		o.MaxConnectionsPerHost = 2
	})
	var open []*wiretest.Conn
	ping := func(c *wiretest.Conn, id uint64) { c.Ping(id) }
	expectRefused := func(ip, reason string) {
		t.Helper()
		before := refusals(t, s, reason)
		r := wiretest.Wrap(t, dialFrom(t, s, ip))
		h, body := r.Reply()
		var er wire.ErrorReply
		if h.ID != 0 || h.Status != wire.StatusOverloaded || er.Decode(body) != nil {
			t.Fatalf("refusal from %s: %v %q", ip, h, body)
		}
		r.ExpectClosed()
		if v := refusals(t, s, reason); v != before+1 {
			t.Fatalf("%s refusals %v, want %v", reason, v, before+1)
		}
	}
	for _, ip := range []string{"127.0.0.1", "127.0.0.1"} {
		c := wiretest.Wrap(t, dialFrom(t, s, ip))
		ping(c, 1)
		open = append(open, c)
	}
	expectRefused("127.0.0.1", refuseMaxPerHost)
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		c := wiretest.Wrap(t, dialFrom(t, s, ip))
		ping(c, 1)
		open = append(open, c)
	}
	expectRefused("127.0.0.4", refuseMaxConns)
	for i, c := range open {
		ping(c, uint64(10+i))
	}
	// A closed connection frees its place, once the server saw it close.
	_ = open[0].NC.Close()
	deadline := time.Now().Add(10 * time.Second)
	for metricValue(gather(t, s), "cell_server_connections", nil) != 3 {
		if time.Now().After(deadline) {
			t.Fatal("the server did not see a connection close")
		}
		time.Sleep(10 * time.Millisecond)
	}
	wiretest.Wrap(t, dialFrom(t, s, "127.0.0.1")).Ping(5)
}

// TestInflightBackpressure: a client pipelining more requests than
// MaxInflightPerConn is slowed (the server stops reading its connection
// while the limit is reached), not refused: every request is answered
// once the workers go on, and another client's connection is served
// meanwhile.
func TestInflightBackpressure(t *testing.T) {
	block := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(block) }) }
	s, _ := newTestServer(t, func(o *Options) {
		o.MaxInflightPerConn = 2
		o.TestingKnobs.BeforeHandle = func(op wire.Op) {
			if op == wire.OpGet {
				<-block
			}
		}
	})
	t.Cleanup(unblock)
	c := dial(t, s)
	put(t, c, "k", "v")
	const n = 10
	errs := make(chan error, n)
	for range n {
		go func() {
			f, err := c.CallMessage(ctxT(t), wire.OpGet, &wire.GetRequest{Key: []byte("k")})
			f.Release()
			errs <- err
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for refusals(t, s, refuseInflight) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the reader never paused at the in-flight limit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Another client is unaffected (a ping needs no worker).
	wiretest.Dial(t, s.Addr()).Ping(1)
	unblock()
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("pipelined get: %v", err)
		}
	}
}

// TestRangeLimitsPage: replies cut at MaxRangePairs and MaxRangeBytes;
// the client pages through and gets every row, in order, both ways.
func TestRangeLimitsPage(t *testing.T) {
	s, store := newTestServer(t, func(o *Options) {
		o.MaxRangePairs = 7
		o.MaxRangeBytes = 300
	})
	c := newClient(t, store, "server")
	ctx := ctxT(t)
	const n = 100
	for i := range n {
		if err := c.Put(ctx, fmt.Appendf(nil, "key%03d", i), fmt.Appendf(nil, "value-%03d-%s", i, string(make([]byte, i%40)))); err != nil {
			t.Fatal(err)
		}
	}
	// One raw reply is cut short.
	wc := dial(t, s)
	var rep wire.RangeReply
	if _, err := call(t, wc, wire.OpRange, &wire.RangeRequest{StartUnbounded: true, EndUnbounded: true}, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.More || len(rep.Pairs) > 7 || len(rep.Pairs) == 0 {
		t.Fatalf("a reply of %d pairs, more %v; want at most 7 and more", len(rep.Pairs), rep.More)
	}
	for _, reverse := range []bool{false, true} {
		pairs, resume, err := c.Range(ctx, nil, nil, client.RangeOptions{Reverse: reverse})
		if err != nil || resume != nil || len(pairs) != n {
			t.Fatalf("reverse %v: %d pairs, resume %q, %v; want %d", reverse, len(pairs), resume, err, n)
		}
		for i, p := range pairs {
			j := i
			if reverse {
				j = n - 1 - i
			}
			if want := fmt.Sprintf("key%03d", j); string(p.Key) != want {
				t.Fatalf("reverse %v: pair %d is %q, want %q", reverse, i, p.Key, want)
			}
		}
	}
	// A pair larger than MaxRangeBytes still goes, alone.
	big := make([]byte, 1000)
	if err := c.Put(ctx, []byte("key050"), big); err != nil {
		t.Fatal(err)
	}
	pairs, _, err := c.Range(ctx, []byte("key049"), []byte("key052"), client.RangeOptions{})
	if err != nil || len(pairs) != 3 || len(pairs[1].Value) != 1000 {
		t.Fatalf("range over a large pair: %d pairs, %v", len(pairs), err)
	}
	for _, r := range []string{refuseRangeRows, refuseRangeBytes} {
		if v := refusals(t, s, r); v < 1 {
			t.Errorf("%s counted %v times", r, v)
		}
	}
}
