package rdma

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/atomicmem"
)

// newTCP starts a responder with opts and a client with copts, closed at
// cleanup, and registers a pattern-filled heap region.
func newTCP(t *testing.T, opts TCPOptions, copts TCPClientOptions) (*TCPResponder, *TCPClient, RemoteKey, uint64) {
	t.Helper()
	region := &memRegion{id: 3, mem: atomicmem.Alloc(1 << 20)}
	seed := uint64(time.Now().UnixNano())
	fillPattern(region.mem, seed)
	opts.Logger = testLogger(t)
	copts.Logger = testLogger(t)
	srv, err := Listen("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := NewTCPClient(copts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Close()
		_ = srv.Close()
	})
	return srv, cl, mustRegister(t, srv, region), seed
}

// stall is a BeforeServe hook that blocks the responder until released.
type stall struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	armed   atomic.Bool
}

func newStall() *stall {
	s := &stall{entered: make(chan struct{}), release: make(chan struct{})}
	s.armed.Store(true)
	return s
}

func (s *stall) hook(Key) {
	if !s.armed.Load() {
		return
	}
	s.once.Do(func() { close(s.entered) })
	<-s.release
}

func (s *stall) wait(t *testing.T) {
	select {
	case <-s.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the responder never received the request")
	}
}

func (s *stall) unblock() {
	s.armed.Store(false)
	close(s.release)
}

// TestTCPPendingReadsFailOnResponderClose: reads in flight when the
// responder closes fail with ErrDisconnected, without waiting for the
// responder's goroutines.
func TestTCPPendingReadsFailOnResponderClose(t *testing.T) {
	st := newStall()
	srv, cl, rk, _ := newTCP(t, TCPOptions{TestingKnobs: TCPResponderKnobs{BeforeServe: st.hook}}, TCPClientOptions{ConnsPerEndpoint: 1})
	const n = 16
	cq := NewCQ(n)
	ops := make([]Op, n)
	for i := range ops {
		ops[i].Prepare(&rk, uint64(i)*8, make([]byte, 8))
		if err := cl.Post(context.Background(), &ops[i], cq); err != nil {
			t.Fatal(err)
		}
	}
	st.wait(t)
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		op, err := cq.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatalf("pending reads did not fail: %v", err)
		}
		if !errors.Is(op.Err(), ErrDisconnected) {
			t.Fatalf("pending read: got %v, want ErrDisconnected", op.Err())
		}
	}
	st.unblock()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := cl.Read(context.Background(), &rk, 0, make([]byte, 8)); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("read after the responder closed: got %v, want ErrDisconnected", err)
	}
}

// TestTCPDeadlineWhileStalled: a read whose deadline passes while the
// responder is stalled returns DeadlineExceeded promptly; the late reply is
// discarded and never lands in the destination, which is the caller's
// again; the connection stays usable. The same for a posted op.
func TestTCPDeadlineWhileStalled(t *testing.T) {
	st := newStall()
	srv, cl, rk, seed := newTCP(t, TCPOptions{TestingKnobs: TCPResponderKnobs{BeforeServe: st.hook}}, TCPClientOptions{ConnsPerEndpoint: 1})
	dst := make([]byte, 64)
	for i := range dst {
		dst[i] = 0xAA
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := cl.Read(ctx, &rk, 0, dst)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stalled read: got %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stalled read returned after %v", d)
	}

	// A posted op, cancelled while in flight.
	pctx, pcancel := context.WithCancel(context.Background())
	cq := NewCQ(1)
	var op Op
	pdst := make([]byte, 64)
	op.Prepare(&rk, 64, pdst)
	if err := cl.Post(pctx, &op, cq); err != nil {
		t.Fatal(err)
	}
	pcancel()
	got, err := cq.Wait(context.Background())
	if err != nil || got != &op || !errors.Is(op.Err(), context.Canceled) {
		t.Fatalf("cancelled op: %v %v", err, op.Err())
	}
	copy(pdst, dst) // the caller owns it again

	st.unblock()
	// The late replies arrive now; a fresh read on the same connection
	// succeeds after them.
	fresh := make([]byte, 64)
	if err := cl.Read(context.Background(), &rk, 128, fresh); err != nil {
		t.Fatal(err)
	}
	checkPattern(t, seed, 128, fresh)
	for i, b := range dst {
		if b != 0xAA || pdst[i] != 0xAA {
			t.Fatalf("a late reply was written into an abandoned destination")
		}
	}
	if s := srv.Stats(); s.Conns != 1 || s.Reads != 3 {
		t.Fatalf("stats %+v: want 1 connection and 3 reads served", s)
	}
}

// TestTCPDeregisterWaitsForCopy: Deregister does not return while a copy
// out of the region is in progress (so the region may be closed after it),
// and that copy's read fails with ErrRevoked.
func TestTCPDeregisterWaitsForCopy(t *testing.T) {
	var (
		srv        *TCPResponder
		hookDone   atomic.Bool
		deregDone  = make(chan bool, 1)
		hookCalled atomic.Bool
	)
	after := func(k Key) {
		if hookCalled.Swap(true) {
			return
		}
		go func() {
			err := srv.Deregister(k)
			deregDone <- err == nil && hookDone.Load()
		}()
		waitFor(t, "the revocation", func() bool { return (*srv.regs.Load())[k].mem == nil })
		time.Sleep(20 * time.Millisecond) // Deregister must still be waiting
		hookDone.Store(true)
	}
	var cl *TCPClient
	var rk RemoteKey
	srv, cl, rk, _ = newTCP(t, TCPOptions{TestingKnobs: TCPResponderKnobs{AfterCopy: after}}, TCPClientOptions{})
	if err := cl.Read(context.Background(), &rk, 0, make([]byte, 4096)); !errors.Is(err, ErrRevoked) {
		t.Fatalf("read overlapping Deregister: got %v, want ErrRevoked", err)
	}
	if ok := <-deregDone; !ok {
		t.Fatal("Deregister returned before the copy in progress ended (or failed)")
	}
}

// TestTCPPipelining: many reads in flight over one connection are answered
// by id; the responder's counters add up.
func TestTCPPipelining(t *testing.T) {
	srv, cl, rk, seed := newTCP(t, TCPOptions{}, TCPClientOptions{ConnsPerEndpoint: 1})
	const n = 1000
	cq := NewCQ(n)
	ops := make([]Op, n)
	var bytes uint64
	for i := range ops {
		size := 8 * (1 + i%64)
		bytes += uint64(size)
		ops[i].Prepare(&rk, uint64(i)*512, make([]byte, size))
		if err := cl.Post(context.Background(), &ops[i], cq); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		op, err := cq.Wait(context.Background())
		if err != nil || op.Err() != nil {
			t.Fatalf("%v %v", err, op.Err())
		}
		checkPattern(t, seed, op.Segs[0].Off, op.Segs[0].Dst)
	}
	// Counters are published per batch of replies, before they are sent.
	s := srv.Stats()
	if s.Conns != 1 || s.OpenConns != 1 || s.Reads != n || s.Segments != n || s.Bytes != bytes {
		t.Fatalf("stats %+v: want 1 connection, %d reads of %d bytes", s, n, bytes)
	}
}

// TestTCPResponderLimits: a client configured with larger limits than the
// responder is refused by the responder with the typed errors, and the
// connection survives.
func TestTCPResponderLimits(t *testing.T) {
	srv, cl, rk, _ := newTCP(t, TCPOptions{Limits: Limits{MaxReadLen: 64 << 10, MaxSegments: 4}},
		TCPClientOptions{ConnsPerEndpoint: 1, Limits: Limits{MaxReadLen: 1 << 20, MaxSegments: 100}})
	ctx := context.Background()
	if err := cl.Read(ctx, &rk, 0, make([]byte, 64<<10+8)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("read over the responder's limit: got %v, want ErrTooLarge", err)
	}
	segs := make([]Segment, 5)
	for i := range segs {
		segs[i] = Segment{Off: uint64(i) * 8, Dst: make([]byte, 8)}
	}
	if err := cl.ReadV(ctx, &rk, segs); !errors.Is(err, ErrTooManySegments) {
		t.Fatalf("vector over the responder's limit: got %v, want ErrTooManySegments", err)
	}
	if err := cl.ReadV(ctx, &rk, segs[:4]); err != nil {
		t.Fatalf("vector within the limit: %v", err)
	}
	wrong := rk
	wrong.Region++
	if err := cl.Read(ctx, &wrong, 0, make([]byte, 8)); !errors.Is(err, ErrBadKey) {
		t.Fatalf("key sent for another region: got %v, want ErrBadKey", err)
	}
	s := srv.Stats()
	if s.TooLarge != 1 || s.TooManySegments != 1 || s.BadKey != 1 || s.Reads != 1 || s.Conns != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestTCPMalformedFrames: a malformed frame closes its connection, not the
// responder; other connections keep being served.
func TestTCPMalformedFrames(t *testing.T) {
	srv, cl, rk, _ := newTCP(t, TCPOptions{}, TCPClientOptions{})
	valid := appendRequest(nil, 1, rk.Key, rk.Region, []Segment{{Off: 0, Dst: make([]byte, 8)}})
	corrupt := func(f func(b []byte)) []byte {
		b := append([]byte(nil), valid...)
		f(b)
		return b
	}
	frames := map[string][]byte{
		"bad magic":       corrupt(func(b []byte) { b[offMagic] = 0xCE }),
		"bad version":     corrupt(func(b []byte) { b[offVersion] = 2 }),
		"unknown op":      corrupt(func(b []byte) { b[offOp] = 0x02 }),
		"flags set":       corrupt(func(b []byte) { b[offFlags] = 1 }),
		"reserved set":    corrupt(func(b []byte) { b[offRsv] = 1 }),
		"no segments":     corrupt(func(b []byte) { le.PutUint16(b[offNSeg:], 0); le.PutUint32(b[offLength:], reqHeaderSize) }),
		"length mismatch": corrupt(func(b []byte) { le.PutUint32(b[offLength:], 1<<30) }),
		"segment rsv set": corrupt(func(b []byte) { b[reqHeaderSize+offSegRsv] = 1 }),
	}
	for name, frame := range frames {
		nc, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(frame); err != nil {
			t.Fatal(err)
		}
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := io.ReadAll(nc); err != nil || len(n) != 0 {
			t.Fatalf("%s: the responder answered %d bytes (%v) instead of closing", name, len(n), err)
		}
		nc.Close()
	}
	waitFor(t, "malformed counts", func() bool { return srv.Stats().Malformed == int64(len(frames)) })
	if err := cl.Read(context.Background(), &rk, 0, make([]byte, 8)); err != nil {
		t.Fatalf("read after malformed frames: %v", err)
	}

	// A valid raw request is answered.
	nc, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write(valid); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, replyHeaderSize+8)
	if _, err := io.ReadFull(nc, reply); err != nil {
		t.Fatal(err)
	}
	if id, st, n, err := parseReplyHeader(reply); err != nil || id != 1 || st != statusOK || n != 8 {
		t.Fatalf("reply: id %d status %v len %d err %v", id, st, n, err)
	}
}

// TestTCPReconnect: after the responder restarts on the same address, the
// client's pool drops the dead connections and dials again.
func TestTCPReconnect(t *testing.T) {
	srv, cl, rk, _ := newTCP(t, TCPOptions{}, TCPClientOptions{ConnsPerEndpoint: 2})
	ctx := context.Background()
	for range 4 {
		if err := cl.Read(ctx, &rk, 0, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
	}
	addr := srv.Addr()
	region := &memRegion{id: 3, mem: atomicmem.Alloc(4096)}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	srv2, err := Listen(addr, TCPOptions{Logger: testLogger(t)})
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	defer srv2.Close()
	rk2 := mustRegister(t, srv2, region)
	// Reads may fail while the pool notices each dead connection; within
	// a few tries every slot is redialed.
	var last error
	for range 6 {
		if last = cl.Read(ctx, &rk2, 0, make([]byte, 8)); last != nil && !errors.Is(last, ErrDisconnected) {
			t.Fatalf("read during reconnection: %v", last)
		}
	}
	for range 4 {
		if err := cl.Read(ctx, &rk2, 0, make([]byte, 8)); err != nil {
			t.Fatalf("read after reconnection: %v", err)
		}
	}
	if err := cl.Read(ctx, &rk, 0, make([]byte, 8)); !errors.Is(err, ErrBadKey) {
		t.Fatalf("the old incarnation's key: got %v, want ErrBadKey", err)
	}
}

// TestTCPTombstones: a responder remembers the last maxTombstones revoked
// keys (ErrRevoked) and forgets older ones (ErrBadKey).
func TestTCPTombstones(t *testing.T) {
	srv, cl, rk, _ := newTCP(t, TCPOptions{}, TCPClientOptions{})
	region := &memRegion{id: 3, mem: atomicmem.Alloc(4096)}
	if err := srv.Deregister(rk.Key); err != nil {
		t.Fatal(err)
	}
	var last RemoteKey
	for range maxTombstones {
		last = mustRegister(t, srv, region)
		if err := srv.Deregister(last.Key); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := cl.Read(ctx, &rk, 0, make([]byte, 8)); !errors.Is(err, ErrBadKey) {
		t.Fatalf("forgotten key: got %v, want ErrBadKey", err)
	}
	if err := cl.Read(ctx, &last, 0, make([]byte, 8)); !errors.Is(err, ErrRevoked) {
		t.Fatalf("recently revoked key: got %v, want ErrRevoked", err)
	}
	if n := len(*srv.regs.Load()); n != maxTombstones {
		t.Fatalf("%d registrations kept, want %d tombstones", n, maxTombstones)
	}
}

// TestTCPClientUnreachable: dialing nowhere fails with ErrDisconnected.
func TestTCPClientUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cl, err := NewTCPClient(TCPClientOptions{Logger: testLogger(t), DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rk := RemoteKey{Provider: ProviderTCP, Key: 1, Len: 4096, Addr: addr}
	if err := cl.Read(context.Background(), &rk, 0, make([]byte, 8)); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("read from a closed port: got %v, want ErrDisconnected", err)
	}
}

// TestTCPOptionsValidate: bad options are refused.
func TestTCPOptionsValidate(t *testing.T) {
	if _, err := Listen("127.0.0.1:0", TCPOptions{Limits: Limits{MaxReadLen: MaxReadLenLimit + 1}}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Listen with a huge MaxReadLen: %v", err)
	}
	if _, err := NewTCPClient(TCPClientOptions{ConnsPerEndpoint: -1}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("NewTCPClient with -1 connections: %v", err)
	}
	if _, err := NewTCPClient(TCPClientOptions{Limits: Limits{MaxSegments: MaxSegmentsLimit + 1}}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("NewTCPClient with too many segments: %v", err)
	}
}

// TestTCPReadAllocs: a synchronous read allocates nothing on the client in
// steady state.
func TestTCPReadAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	_, cl, rk, _ := newTCP(t, TCPOptions{}, TCPClientOptions{ConnsPerEndpoint: 1})
	dst := make([]byte, 1024)
	ctx := context.Background()
	for range 100 {
		if err := cl.Read(ctx, &rk, 0, dst); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(500, func() {
		if err := cl.Read(ctx, &rk, 0, dst); err != nil {
			t.Fatal(err)
		}
	})
	// The client side: pooled call, map insert/delete. Allow a fraction
	// for the map's occasional growth and the runtime.
	if allocs > 0.5 {
		t.Fatalf("%.2f allocations per read, want ~0", allocs)
	}
	// Posted ops with a context that cannot end allocate nothing either.
	cq := NewCQ(1)
	var op Op
	op.Prepare(&rk, 64, dst)
	allocs = testing.AllocsPerRun(500, func() {
		if err := cl.Post(ctx, &op, cq); err != nil {
			t.Fatal(err)
		}
		if got, err := cq.Wait(ctx); err != nil || got.Err() != nil {
			t.Fatal(err, got.Err())
		}
	})
	if allocs > 0.5 {
		t.Fatalf("%.2f allocations per posted read, want ~0", allocs)
	}
}

// TestTCPResponderWriteTimeout: a client that sends requests but never
// reads the replies loses its connection after WriteTimeout.
func TestTCPResponderWriteTimeout(t *testing.T) {
	srv, _, rk, _ := newTCP(t, TCPOptions{WriteTimeout: 100 * time.Millisecond}, TCPClientOptions{})
	nc, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var reqs []byte
	for i := range 64 {
		reqs = appendRequest(reqs, uint64(i+1), rk.Key, rk.Region, []Segment{{Off: 0, Dst: make([]byte, 1<<20)}})
	}
	if _, err := nc.Write(reqs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection to be accepted", func() bool { return srv.Stats().Conns == 1 })
	waitFor(t, "the responder to drop the connection", func() bool { return srv.Stats().OpenConns == 0 })
}
