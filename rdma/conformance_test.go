package rdma

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/crc64"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/internal/monotime"
	"github.com/cellstore/cell/meganode"
)

// The conformance suite: every provider must pass every test here. A new
// provider (libfabric) adds a harness to harnesses.

// harness starts one provider's server and a client connected to it.
type harness struct {
	// name names the harness in test names: the provider's, or the
	// provider's with a variant ("tcp+tls").
	name string
	// provider is the provider's name ("" means name).
	provider string
	start    func(t testing.TB, k harnessKnobs) *pair
}

// providerName is the name the harness's server and client report.
func (h harness) providerName() string {
	if h.provider != "" {
		return h.provider
	}
	return h.name
}

// harnessKnobs are the hooks a conformance test needs from a provider.
type harnessKnobs struct {
	// afterCopy fires when a read's bytes were copied, before the provider
	// checks that the key is still registered.
	afterCopy func(Key)
}

// pair is a running server and client of one provider.
type pair struct {
	srv Server
	cl  Client
	// revoked reports whether the server has published the revocation of
	// k (Deregister may still be running).
	revoked func(k Key) bool
}

var harnesses = []harness{
	{name: ProviderTCP, start: startTCP},
	{name: ProviderTCP + "+tls", provider: ProviderTCP, start: startTCPTLS},
	{name: ProviderSHM, start: startSHM},
}

func startTCP(t testing.TB, k harnessKnobs) *pair { return startTCPWith(t, k, nil, nil) }

// startTCPTLS is the tcp provider over TLS, with client certificates
// required (development certificates from tlsconf).
func startTCPTLS(t testing.TB, k harnessKnobs) *pair {
	certs := newTestCerts(t)
	return startTCPWith(t, k, certs.server(t), certs.client(t, "client"))
}

func startTCPWith(t testing.TB, k harnessKnobs, stls, ctls *tls.Config) *pair {
	srv, err := Listen("127.0.0.1:0", TCPOptions{TLS: stls, Logger: testLogger(t), TestingKnobs: TCPResponderKnobs{AfterCopy: k.afterCopy}})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := NewTCPClient(TCPClientOptions{TLS: ctls, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Errorf("client Close: %v", err)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("responder Close: %v", err)
		}
	})
	return &pair{srv: srv, cl: cl, revoked: func(k Key) bool {
		reg := (*srv.regs.Load())[k]
		return reg == nil || reg.mem == nil
	}}
}

func startSHM(t testing.TB, k harnessKnobs) *pair {
	srv, err := NewSHMServer(SHMOptions{Dir: t.TempDir(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := NewSHMClient(SHMClientOptions{TestingKnobs: SHMClientKnobs{AfterCopy: k.afterCopy}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Errorf("client Close: %v", err)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("server Close: %v", err)
		}
	})
	return &pair{srv: srv, cl: cl, revoked: func(k Key) bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		_, live := srv.mu.live[k]
		return !live
	}}
}

func TestConformance(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h harness)
	}{
		{"ReadExact", testReadExact},
		{"VectorReads", testVectorReads},
		{"OffHeapDestination", testOffHeapDestination},
		{"Errors", testErrors},
		{"ServerChecksBounds", testServerChecksBounds},
		{"DeregisterRevokesAtOnce", testDeregisterRevokesAtOnce},
		{"RevokeDuringCopy", testRevokeDuringCopy},
		{"ManyInFlight", testManyInFlight},
		{"CQLimits", testCQLimits},
		{"ConcurrentReaders", testConcurrentReaders},
		{"ContextEnded", testContextEnded},
		{"TornMidWrite", testTornMidWrite},
		{"HotNode", testHotNode},
		{"ConcurrentWriter", testConcurrentWriter},
		{"ServerClose", testServerClose},
		{"ClientClose", testClientClose},
		{"Caps", testCaps},
		{"LeaseFencesReads", testLeaseFencesReads},
	}
	for _, h := range harnesses {
		t.Run("provider="+h.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
			}
		})
	}
}

// patternRegion returns a file region filled with a pattern, registered
// with a fresh pair (the region outlives the pair: cleanups run in
// reverse).
func patternRegion(t *testing.T, h harness, k harnessKnobs) (*pair, *meganode.Region, RemoteKey, uint64) {
	region := newFileRegion(t, 5)
	seed := rand.Uint64()
	fillPattern(region.Bytes(), seed)
	p := h.start(t, k)
	return p, region, mustRegister(t, p.srv, region), seed
}

// testReadExact: reads return exactly the bytes in the region, for sizes
// from one word to the limit, at the region's ends, into aligned and
// unaligned destinations, directly and through Post.
func testReadExact(t *testing.T, h harness) {
	p, _, rk, seed := patternRegion(t, h, harnessKnobs{})
	ctx := context.Background()
	max := uint64(p.cl.Caps().MaxReadLen)
	cases := []struct{ off, n uint64 }{
		{0, 8}, {8, 1024}, {4096, 64 << 10}, {rk.Len - 8, 8}, {rk.Len - 1<<20, 1 << 20},
		{0, max}, {rk.Len - max, max}, {123 * 8, 0},
	}
	for _, mode := range []readMode{modeSync, modePost} {
		for _, c := range cases {
			for _, dst := range [][]byte{atomicmem.Alloc(int(c.n)), unaligned(int(c.n))} {
				if err := doRead(ctx, p.cl, mode, &rk, []Segment{{Off: c.off, Dst: dst}}); err != nil {
					t.Fatalf("%v read of %d bytes at %d: %v", mode, c.n, c.off, err)
				}
				checkPattern(t, seed, c.off, dst)
			}
		}
	}
}

// testVectorReads: a vector read lands every range in its own
// destination; ranges may repeat, be empty, or come in any order.
func testVectorReads(t *testing.T, h harness) {
	p, _, rk, seed := patternRegion(t, h, harnessKnobs{})
	ctx := context.Background()
	offs := []uint64{rk.Len - 8, 0, 4096, 4096, 1 << 20, 77 * 8}
	lens := []int{8, 1024, 64, 64, 0, 4096}
	for _, mode := range []readMode{modeSync, modePost} {
		segs := make([]Segment, len(offs))
		for i := range segs {
			dst := atomicmem.Alloc(lens[i])
			if i%2 == 1 {
				dst = unaligned(lens[i])
			}
			segs[i] = Segment{Off: offs[i], Dst: dst}
		}
		if err := doRead(ctx, p.cl, mode, &rk, segs); err != nil {
			t.Fatalf("%v ReadV: %v", mode, err)
		}
		for _, s := range segs {
			checkPattern(t, seed, s.Off, s.Dst)
		}
		// The most segments allowed, each one word.
		many := make([]Segment, p.cl.Caps().MaxSegments)
		for i := range many {
			many[i] = Segment{Off: uint64(i) * 4096, Dst: make([]byte, 8)}
		}
		if err := doRead(ctx, p.cl, mode, &rk, many); err != nil {
			t.Fatalf("%v ReadV of %d segments: %v", mode, len(many), err)
		}
		for _, s := range many {
			checkPattern(t, seed, s.Off, s.Dst)
		}
	}
	if err := p.cl.ReadV(ctx, &rk, nil); err != nil {
		t.Fatalf("ReadV of no segments: %v", err)
	}
	var empty Op
	empty.PrepareV(&rk, nil)
	if err := ReadAll(ctx, p.cl, []*Op{&empty}); err != nil {
		t.Fatalf("posted op of no segments: %v", err)
	}
}

// testOffHeapDestination: destinations may live outside the Go heap (a
// landing area mapped by the caller), for single, vector and posted reads.
func testOffHeapDestination(t *testing.T, h harness) {
	p, _, rk, seed := patternRegion(t, h, harnessKnobs{})
	area := offHeap(t, 1<<20)
	ctx := context.Background()
	if err := p.cl.Read(ctx, &rk, 8192, area[:64<<10]); err != nil {
		t.Fatal(err)
	}
	checkPattern(t, seed, 8192, area[:64<<10])
	segs := []Segment{{Off: 0, Dst: area[1<<19 : 1<<19+1024]}, {Off: 1 << 20, Dst: area[3 : 3+4096]}}
	if err := p.cl.ReadV(ctx, &rk, segs); err != nil {
		t.Fatal(err)
	}
	var op Op
	op.Prepare(&rk, rk.Len-4096, area[len(area)-4096:])
	if err := ReadAll(ctx, p.cl, []*Op{&op}); err != nil {
		t.Fatal(err)
	}
	for _, s := range append(segs, op.Segs...) {
		checkPattern(t, seed, s.Off, s.Dst)
	}
}

// testErrors: bad ranges and keys are rejected with their typed errors,
// directly and through Post.
func testErrors(t *testing.T, h harness) {
	p, _, rk, _ := patternRegion(t, h, harnessKnobs{})
	caps := p.cl.Caps()
	max := uint64(caps.MaxReadLen)
	seg := func(off uint64, n int) []Segment { return []Segment{{Off: off, Dst: make([]byte, n)}} }
	segs := func(n, size int) []Segment {
		s := make([]Segment, n)
		for i := range s {
			s[i] = Segment{Off: uint64(i) * 8, Dst: make([]byte, size)}
		}
		return s
	}
	badKey := rk
	badKey.Key ^= 1 << 20
	otherProvider := rk
	otherProvider.Provider = "other"
	cases := []struct {
		name string
		rk   *RemoteKey
		segs []Segment
		want error
	}{
		{"misaligned offset", &rk, seg(4, 8), ErrMisaligned},
		{"misaligned length", &rk, seg(8, 12), ErrMisaligned},
		{"misaligned segment", &rk, append(seg(0, 8), seg(8, 7)...), ErrMisaligned},
		{"past the end", &rk, seg(rk.Len-8, 16), ErrOutOfBounds},
		{"beyond the end", &rk, seg(rk.Len+8, 8), ErrOutOfBounds},
		{"offset overflow", &rk, seg(1<<64-8, 16), ErrOutOfBounds},
		{"too large", &rk, seg(0, int(max)+8), ErrTooLarge},
		{"too large in all", &rk, segs(2, int(max/2)+8), ErrTooLarge},
		{"too many segments", &rk, segs(caps.MaxSegments+1, 8), ErrTooManySegments},
		{"bad key", &badKey, seg(0, 8), ErrBadKey},
		{"other provider", &otherProvider, seg(0, 8), ErrBadKey},
		{"nil key", nil, seg(0, 8), ErrBadKey},
	}
	for _, mode := range []readMode{modeSync, modePost} {
		for _, c := range cases {
			err := doRead(context.Background(), p.cl, mode, c.rk, c.segs)
			if !errors.Is(err, c.want) {
				t.Errorf("%v %s: got %v, want %v", mode, c.name, err, c.want)
				continue
			}
			if !strings.HasPrefix(err.Error(), "rdma: ") {
				t.Errorf("%v %s: error %q lacks the package prefix", mode, c.name, err)
			}
		}
	}
	// The registration still works after all that.
	if err := p.cl.Read(context.Background(), &rk, 0, make([]byte, 8)); err != nil {
		t.Fatalf("read after errors: %v", err)
	}
}

// testServerChecksBounds: a client that lies about the region's length
// (a corrupt or forged RemoteKey) is still refused beyond the registered
// region: the provider's own check, not the client's, is what counts.
func testServerChecksBounds(t *testing.T, h harness) {
	p, _, rk, _ := patternRegion(t, h, harnessKnobs{})
	forged := rk
	forged.Len = 2 * rk.Len
	for _, off := range []uint64{rk.Len, rk.Len - 8, 3 * rk.Len / 2} {
		err := p.cl.Read(context.Background(), &forged, off, make([]byte, 16))
		if !errors.Is(err, ErrOutOfBounds) {
			t.Errorf("read at %d of a region of %d with a forged length: got %v, want ErrOutOfBounds", off, rk.Len, err)
		}
	}
}

// testDeregisterRevokesAtOnce: docs/design.md §6 "Deregister revokes access at
// once": the first read after Deregister returns fails, with no delay;
// other registrations are unaffected; a new registration has a new key.
func testDeregisterRevokesAtOnce(t *testing.T, h harness) {
	p, region, rk, seed := patternRegion(t, h, harnessKnobs{})
	ctx := context.Background()
	rk2 := mustRegister(t, p.srv, region)
	if rk2.Key == rk.Key {
		t.Fatalf("two registrations got the same key %v", rk.Key)
	}
	dst := make([]byte, 64)
	for _, mode := range []readMode{modeSync, modePost} {
		if err := doRead(ctx, p.cl, mode, &rk, []Segment{{Off: 64, Dst: dst}}); err != nil {
			t.Fatalf("%v read before Deregister: %v", mode, err)
		}
	}
	if err := p.srv.Deregister(rk.Key); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	for _, mode := range []readMode{modeSync, modePost} {
		if err := doRead(ctx, p.cl, mode, &rk, []Segment{{Off: 64, Dst: dst}}); !errors.Is(err, ErrRevoked) {
			t.Fatalf("%v read right after Deregister: got %v, want ErrRevoked", mode, err)
		}
	}
	if err := p.srv.Deregister(rk.Key); !errors.Is(err, ErrBadKey) {
		t.Fatalf("second Deregister: got %v, want ErrBadKey", err)
	}
	if err := p.cl.Read(ctx, &rk2, 64, dst); err != nil {
		t.Fatalf("read of the other registration: %v", err)
	}
	checkPattern(t, seed, 64, dst)
	rk3 := mustRegister(t, p.srv, region)
	if rk3.Key == rk.Key || rk3.Key == rk2.Key {
		t.Fatalf("re-registration reused a key")
	}
	if err := p.cl.Read(ctx, &rk3, 64, dst); err != nil {
		t.Fatalf("read of the new registration: %v", err)
	}
	if err := p.cl.Read(ctx, &rk, 64, dst); !errors.Is(err, ErrRevoked) {
		t.Fatalf("old key after re-registration: got %v, want ErrRevoked", err)
	}
}

// testRevokeDuringCopy: a read whose copy overlaps Deregister is not
// returned as valid, even though every byte was copied.
func testRevokeDuringCopy(t *testing.T, h harness) {
	var (
		p      *pair
		target atomic.Uint64
		fired  atomic.Bool
		done   = make(chan error, 1)
	)
	k := harnessKnobs{afterCopy: func(k Key) {
		if uint64(k) != target.Load() || fired.Swap(true) {
			return
		}
		go func() { done <- p.srv.Deregister(k) }()
		waitFor(t, "the revocation to be published", func() bool { return p.revoked(k) })
	}}
	var rk RemoteKey
	p, _, rk, _ = patternRegion(t, h, k)
	target.Store(uint64(rk.Key))
	err := p.cl.Read(context.Background(), &rk, 0, make([]byte, 1024))
	if !fired.Load() {
		t.Fatal("the copy hook did not fire")
	}
	if !errors.Is(err, ErrRevoked) {
		t.Fatalf("read overlapping Deregister: got %v, want ErrRevoked", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Deregister: %v", err)
	}
}

// testManyInFlight: hundreds of single and vector reads posted at once on
// one CQ all complete with the right bytes; Tag is preserved.
func testManyInFlight(t *testing.T, h harness) {
	p, _, rk, seed := patternRegion(t, h, harnessKnobs{})
	const n = 512
	cq := NewCQ(n)
	ops := make([]Op, n)
	r := rand.New(rand.NewPCG(seed, 2))
	for i := range ops {
		op := &ops[i]
		op.Tag = uint64(i)
		if i%4 == 3 {
			segs := make([]Segment, 4)
			for j := range segs {
				segs[j] = Segment{Off: r.Uint64N(rk.Len/8-128) * 8, Dst: make([]byte, 1024)}
			}
			op.PrepareV(&rk, segs)
		} else {
			size := 8 << r.IntN(12)
			op.Prepare(&rk, r.Uint64N((rk.Len-uint64(size))/8)*8, make([]byte, size))
		}
		if err := p.cl.Post(context.Background(), op, cq); err != nil {
			t.Fatalf("Post %d: %v", i, err)
		}
	}
	seen := make([]bool, n)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		op, err := cq.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if op.Err() != nil {
			t.Fatalf("op %d: %v", op.Tag, op.Err())
		}
		if seen[op.Tag] || op != &ops[op.Tag] {
			t.Fatalf("op %d completed twice or with the wrong tag", op.Tag)
		}
		seen[op.Tag] = true
		for _, s := range op.Segs {
			checkPattern(t, seed, s.Off, s.Dst)
		}
	}
	if cq.Outstanding() != 0 || cq.Poll() != nil {
		t.Fatalf("CQ not empty after all completions: %d outstanding", cq.Outstanding())
	}
	// Ops are reusable once taken.
	for i := 0; i < 50; i++ {
		op := &ops[i%n]
		if err := p.cl.Post(context.Background(), op, cq); err != nil {
			t.Fatalf("repost: %v", err)
		}
		if got, _ := cq.Wait(context.Background()); got != op || got.Err() != nil {
			t.Fatalf("repost completed %p (%v), want %p", got, got.Err(), op)
		}
	}
	// ReadAll is the blocking form.
	ptrs := make([]*Op, 16)
	for i := range ptrs {
		ptrs[i] = &ops[i]
	}
	if err := ReadAll(context.Background(), p.cl, ptrs); err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
}

// testCQLimits: a CQ holds at most its depth of outstanding completions,
// and an op cannot be posted again before its completion is taken.
func testCQLimits(t *testing.T, h harness) {
	p, _, rk, _ := patternRegion(t, h, harnessKnobs{})
	ctx := context.Background()
	cq := NewCQ(1)
	var a, b Op
	a.Prepare(&rk, 0, make([]byte, 8))
	b.Prepare(&rk, 8, make([]byte, 8))
	if err := p.cl.Post(ctx, &a, cq); err != nil {
		t.Fatal(err)
	}
	if err := p.cl.Post(ctx, &b, cq); !errors.Is(err, ErrCQFull) {
		t.Fatalf("second post to a CQ of depth 1: got %v, want ErrCQFull", err)
	}
	if err := p.cl.Post(ctx, &a, NewCQ(1)); !errors.Is(err, ErrInFlight) {
		t.Fatalf("posting an op in flight: got %v, want ErrInFlight", err)
	}
	if op, err := cq.Wait(ctx); err != nil || op != &a || op.Err() != nil {
		t.Fatalf("Wait: %v %v", err, op.Err())
	}
	// Both are postable again.
	if err := ReadAll(ctx, p.cl, []*Op{&a, &b}); err != nil {
		t.Fatal(err)
	}
	if op := cq.Poll(); op != nil {
		t.Fatalf("Poll on an empty CQ returned an op")
	}
	wctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if _, err := cq.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty CQ: got %v, want DeadlineExceeded", err)
	}
}

// testConcurrentReaders: the client is safe for concurrent use.
func testConcurrentReaders(t *testing.T, h harness) {
	p, _, rk, seed := patternRegion(t, h, harnessKnobs{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			dst := make([]byte, 4096)
			for range 200 {
				n := 8 * (1 + r.IntN(512))
				off := r.Uint64N((rk.Len-uint64(n))/8) * 8
				if err := p.cl.Read(context.Background(), &rk, off, dst[:n]); err != nil {
					t.Errorf("read: %v", err)
					return
				}
				if want := wantPattern(seed, off, n); string(want) != string(dst[:n]) {
					t.Errorf("read of %d bytes at %d returned wrong bytes", n, off)
					return
				}
			}
		})
	}
	wg.Wait()
}

// testContextEnded: a read whose context has ended is not started, and
// says why.
func testContextEnded(t *testing.T, h harness) {
	p, _, rk, _ := patternRegion(t, h, harnessKnobs{})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		if err := p.cl.Read(c.ctx, &rk, 0, make([]byte, 8)); !errors.Is(err, c.want) {
			t.Errorf("Read: got %v, want %v", err, c.want)
		}
		if err := p.cl.ReadV(c.ctx, &rk, []Segment{{Dst: make([]byte, 8)}}); !errors.Is(err, c.want) {
			t.Errorf("ReadV: got %v, want %v", err, c.want)
		}
		cq := NewCQ(1)
		var op Op
		op.Prepare(&rk, 0, make([]byte, 8))
		if err := p.cl.Post(c.ctx, &op, cq); !errors.Is(err, c.want) {
			t.Errorf("Post: got %v, want %v", err, c.want)
		}
		if cq.Outstanding() != 0 {
			t.Errorf("a refused Post left %d completions outstanding", cq.Outstanding())
		}
		if err := ReadAll(context.Background(), p.cl, []*Op{&op}); err != nil {
			t.Errorf("the refused op is not reusable: %v", err)
		}
	}
}

// newTreeRegion returns a file region holding one leaf meganode.
func newTreeRegion(t *testing.T) (*meganode.Region, *meganode.Meganode) {
	region := newFileRegion(t, 9)
	m, err := region.NewMeganode(0, blink.Full, blink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return region, m
}

// testTornMidWrite: paper §2.3, "If the RDMA read of a node is interleaved
// with the server's modification of that node, it will either see
// mismatched version numbers or the same odd value, indicating that the
// read must be retried." The writer is paused halfway through publishing
// each node; a one-sided read of that node then must be rejected as torn.
// This also shows the provider reads live memory, not a snapshot.
func testTornMidWrite(t *testing.T, h harness) {
	region, m := newTreeRegion(t)
	p := h.start(t, harnessKnobs{})
	rk := mustRegister(t, p.srv, region)
	tree := m.Tree()
	ns := tree.NodeSize()
	buf := atomicmem.Alloc(ns)
	var hooks, bad int
	tree.SetTestingKnobs(blink.TestingKnobs{MidNodeWrite: func(ptr blink.Ptr) {
		hooks++
		err := p.cl.Read(context.Background(), &rk, ptr.Offset(), buf)
		if err != nil {
			t.Errorf("read of node %v mid-write: %v", ptr, err)
			bad++
			return
		}
		if r := blink.CheckCopy(buf); r != blink.Torn {
			t.Errorf("node %v read mid-write was judged %v, want torn", ptr, r)
			bad++
		}
	}})
	for i := range 300 {
		if err := tree.Put(fmt.Appendf(nil, "key-%05d", i*7919%300), fmt.Appendf(nil, "value-%d", i)); err != nil {
			t.Fatal(err)
		}
		if bad > 3 {
			t.FailNow()
		}
	}
	if hooks < 300 {
		t.Fatalf("only %d mid-write pauses for 300 puts", hooks)
	}
}

// testConcurrentWriter: readers read nodes one-sided while a writer changes
// the tree. Every copy is either accepted by blink.CheckCopy or rejected;
// never is an accepted copy wrong: two accepted copies of one node with
// the same version are identical (a version names one image: the writer
// publishes each image between an odd and the next even version), and
// once the writer stops every node reads back exactly as in memory.
func testConcurrentWriter(t *testing.T, h harness) {
	region, m := newTreeRegion(t)
	p := h.start(t, harnessKnobs{})
	rk := mustRegister(t, p.srv, region)
	tree := m.Tree()
	ns := tree.NodeSize()
	base := m.Base()
	nodes := int(m.Size()) / ns
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	const keys = 2500
	key := func(i int) []byte { return fmt.Appendf(nil, "k%06d", i) }
	value := func() []byte { return make([]byte, 8+r.IntN(120)) }
	for i := range keys / 2 {
		if err := tree.Put(key(2*i), value()); err != nil {
			t.Fatal(err)
		}
	}
	used := min(nodes, tree.Usage().Nodes+64)

	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		mu      sync.Mutex
		images  = make(map[[2]uint64]uint64) // (offset, version) -> CRC of the accepted copy
		reasons [8]atomic.Int64
		reads   atomic.Int64
	)
	table := crc64.MakeTable(crc64.ECMA)
	record := func(off uint64, b []byte) {
		k := [2]uint64{off, le.Uint64(b)}
		sum := crc64.Checksum(b, table)
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := images[k]; ok && prev != sum {
			t.Errorf("two different accepted copies of node at %#x version %d", off, k[1])
		}
		images[k] = sum
	}
	judge := func(off uint64, b []byte) {
		reason := blink.CheckCopy(b)
		reasons[reason].Add(1)
		switch reason {
		case blink.OK:
			record(off, b)
		case blink.Corrupt:
			t.Errorf("copy of node at %#x is corrupt:\n%s", off, blink.DescribeNode(b))
		}
	}
	for g := range 3 {
		wg.Go(func() {
			rr := rand.New(rand.NewPCG(seed, uint64(g+1)))
			one := atomicmem.Alloc(ns)
			four := atomicmem.Alloc(4 * ns)
			for !stop.Load() {
				i := rr.IntN(used)
				off := base + uint64(i*ns)
				if i%4 == 0 && i+4 <= nodes {
					segs := []Segment{
						{Off: off + uint64(2*ns), Dst: four[2*ns : 3*ns]},
						{Off: off, Dst: four[:ns]},
						{Off: off + uint64(3*ns), Dst: four[3*ns:]},
						{Off: off + uint64(ns), Dst: four[ns : 2*ns]},
					}
					if err := p.cl.ReadV(context.Background(), &rk, segs); err != nil {
						t.Errorf("ReadV: %v", err)
						return
					}
					for j := range 4 {
						judge(off+uint64(j*ns), four[j*ns:(j+1)*ns])
					}
				} else {
					if err := p.cl.Read(context.Background(), &rk, off, one); err != nil {
						t.Errorf("Read: %v", err)
						return
					}
					judge(off, one)
				}
				reads.Add(1)
			}
		})
	}
	start := time.Now()
	ops := 0
	for ops < 3000 || (time.Since(start) < 3*time.Second && (reads.Load() < 2000 || time.Since(start) < 300*time.Millisecond)) {
		i := r.IntN(keys)
		var err error
		if r.IntN(3) == 0 {
			_, err = tree.Delete(key(i))
		} else {
			err = tree.Put(key(i), value())
		}
		if err != nil && !errors.Is(err, blink.ErrNeedsSplit) {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("writer: %v", err)
		}
		ops++
		if t.Failed() {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	if err := tree.CheckErr(); err != nil {
		t.Fatalf("tree check: %v", err)
	}
	t.Logf("%d writer ops, %d reads: ok %d torn %d invalid %d, %d distinct images",
		ops, reads.Load(), reasons[blink.OK].Load(), reasons[blink.Torn].Load(), reasons[blink.Invalid].Load(), len(images))
	if reasons[blink.OK].Load() < 100 {
		t.Fatalf("only %d accepted copies: the test did not exercise the read path", reasons[blink.OK].Load())
	}

	// Quiescent: every node of the meganode reads back exactly.
	want := atomicmem.Alloc(64 * ns)
	got := atomicmem.Alloc(64 * ns)
	for first := 0; first < nodes; first += 64 {
		n := min(64, nodes-first) * ns
		off := base + uint64(first*ns)
		if err := p.cl.Read(context.Background(), &rk, off, got[:n]); err != nil {
			t.Fatal(err)
		}
		atomicmem.Load(want[:n], region.Bytes()[off:off+uint64(n)])
		if string(got[:n]) != string(want[:n]) {
			t.Fatalf("nodes %d..%d read back differently from memory", first, first+n/ns)
		}
	}
}

// testHotNode: readers read one node one-sided while the writer rewrites
// it back to back, so most copies overlap a publish. Every copy that
// blink.CheckCopy accepts must be byte for byte the image the writer
// published under that version (the writer records each one after its
// Put). This catches a provider that copies out of address order or not
// word-atomically, which the version check alone cannot.
func testHotNode(t *testing.T, h harness) {
	region, m := newTreeRegion(t)
	p := h.start(t, harnessKnobs{})
	rk := mustRegister(t, p.srv, region)
	tree := m.Tree()
	ns := tree.NodeSize()
	key := func(i int) []byte { return fmt.Appendf(nil, "hot-%d", i) }
	for i := range 8 {
		if err := tree.Put(key(i), []byte("initial")); err != nil {
			t.Fatal(err)
		}
	}
	if u := tree.Usage(); u.Height != 1 {
		t.Fatalf("tree of height %d, want a single leaf", u.Height)
	}
	root := tree.Root()
	table := crc64.MakeTable(crc64.ECMA)
	published := make(map[uint64]uint64) // version -> CRC; the writer's until the readers stop
	snap := atomicmem.Alloc(ns)
	publish := func() {
		if !tree.NodeBytes(root, snap) {
			t.Fatalf("node %v is not in the meganode", root)
		}
		published[le.Uint64(snap)] = crc64.Checksum(snap, table)
	}
	publish()

	type copyID struct{ version, sum uint64 }
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		accepted = make([][]copyID, 2)
		torn     atomic.Int64
	)
	for g := range accepted {
		wg.Go(func() {
			buf := atomicmem.Alloc(ns)
			for !stop.Load() {
				if err := p.cl.Read(context.Background(), &rk, root.Offset(), buf); err != nil {
					t.Errorf("Read: %v", err)
					return
				}
				switch r := blink.CheckCopy(buf); r {
				case blink.OK:
					accepted[g] = append(accepted[g], copyID{le.Uint64(buf), crc64.Checksum(buf, table)})
				case blink.Torn:
					torn.Add(1)
				default:
					t.Errorf("copy of the hot node judged %v", r)
					return
				}
			}
		})
	}
	start := time.Now()
	ops := 0
	for ; time.Since(start) < 300*time.Millisecond && !t.Failed(); ops++ {
		if err := tree.Put(key(ops%8), make([]byte, 1+ops%61)); err != nil {
			t.Fatal(err)
		}
		publish()
	}
	stop.Store(true)
	wg.Wait()
	verified, unknown := 0, 0
	for _, list := range accepted {
		for _, c := range list {
			want, ok := published[c.version]
			switch {
			case !ok:
				unknown++
			case want != c.sum:
				t.Errorf("an accepted copy of version %d differs from the image the writer published", c.version)
			default:
				verified++
			}
		}
	}
	t.Logf("%d writes, %d accepted copies verified, %d of unrecorded versions, %d torn", ops, verified, unknown, torn.Load())
	if verified < 50 {
		t.Fatalf("only %d accepted copies verified", verified)
	}
	if unknown > verified/10 {
		t.Fatalf("%d accepted copies of versions the writer never left the node in", unknown)
	}
}

// isTypedFailure reports whether err is one of the errors a read may fail
// with when the server goes away.
func isTypedFailure(err error) bool {
	return errors.Is(err, ErrDisconnected) || errors.Is(err, ErrRevoked) || errors.Is(err, ErrBadKey) || errors.Is(err, ErrClosed)
}

// testServerClose: reads racing with the server's Close either succeed
// with the right bytes or fail with a typed error; once Close has
// returned, every read fails.
func testServerClose(t *testing.T, h harness) {
	p, _, rk, seed := patternRegion(t, h, harnessKnobs{})
	var (
		closed    atomic.Bool
		succeeded atomic.Int64
		wg        sync.WaitGroup
	)
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			dst := make([]byte, 1024)
			after := 0
			for after < 20 {
				wasClosed := closed.Load()
				off := r.Uint64N(rk.Len/8-128) * 8
				err := p.cl.Read(context.Background(), &rk, off, dst)
				switch {
				case err == nil && wasClosed:
					t.Errorf("a read started after Close returned succeeded")
					return
				case err == nil:
					checkPattern(t, seed, off, dst)
					succeeded.Add(1)
				case !isTypedFailure(err):
					t.Errorf("read failed with an untyped error: %v", err)
					return
				}
				if wasClosed {
					after++
				}
			}
		})
	}
	waitFor(t, "reads to succeed", func() bool { return succeeded.Load() >= 100 || t.Failed() })
	if err := p.srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed.Store(true)
	wg.Wait()
	if _, err := p.srv.Register(&memRegion{mem: atomicmem.Alloc(64)}); !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotShareable) {
		t.Fatalf("Register after Close: %v", err)
	}
	if err := p.srv.Deregister(rk.Key); !errors.Is(err, ErrClosed) {
		t.Fatalf("Deregister after Close: got %v, want ErrClosed", err)
	}
}

// testClientClose: a closed client fails every read with ErrClosed.
func testClientClose(t *testing.T, h harness) {
	p, _, rk, _ := patternRegion(t, h, harnessKnobs{})
	if err := p.cl.Read(context.Background(), &rk, 0, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if err := p.cl.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.cl.Read(context.Background(), &rk, 0, make([]byte, 8)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: got %v, want ErrClosed", err)
	}
	var op Op
	op.Prepare(&rk, 0, make([]byte, 8))
	if err := p.cl.Post(context.Background(), &op, NewCQ(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Post after Close: got %v, want ErrClosed", err)
	}
	if err := p.cl.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// testCaps: both sides state the same capabilities, every provider reads
// in address order (Cell's node format depends on it), and String names
// them.
func testCaps(t *testing.T, h harness) {
	p := h.start(t, harnessKnobs{})
	sc, cc := p.srv.Caps(), p.cl.Caps()
	if sc != cc {
		t.Fatalf("server caps %v, client caps %v", sc, cc)
	}
	if !cc.OrderedReads || !cc.VectorReads {
		t.Fatalf("caps %v lack ordered or vector reads", cc)
	}
	if p.srv.Provider() != h.providerName() || p.cl.Provider() != h.providerName() {
		t.Fatalf("provider names %q/%q, want %q", p.srv.Provider(), p.cl.Provider(), h.providerName())
	}
	s := cc.String()
	if !strings.Contains(s, "ordered-reads") || !strings.Contains(s, "max-read=2MiB") || !strings.Contains(s, "max-segments=64") {
		t.Fatalf("Caps.String() = %q", s)
	}
	t.Logf("%s: %s", h.name, s)
}

// testLeaseFencesReads: a registration's lease ends its reads at the
// deadline, with no call from the server (docs/design.md §9: "a paused (SIGSTOP)
// or deposed leader's memory is never trusted"); a renewal restores them,
// and 0 removes the lease.
func testLeaseFencesReads(t *testing.T, h harness) {
	p, _, rk, seed := patternRegion(t, h, harnessKnobs{})
	ctx := context.Background()
	read := func() error {
		dst := atomicmem.Alloc(64)
		err := p.cl.Read(ctx, &rk, 4096, dst)
		if err == nil {
			checkPattern(t, seed, 4096, dst)
		}
		return err
	}
	if err := p.srv.SetLease(rk.Key, monotime.Now()+int64(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := read(); err != nil {
		t.Fatalf("read under a lease: %v", err)
	}
	if err := p.srv.SetLease(rk.Key, monotime.Now()+int64(20*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if err := read(); !errors.Is(err, ErrRevoked) {
		t.Fatalf("read after the lease ended: %v, want ErrRevoked", err)
	}
	if err := p.srv.SetLease(rk.Key, monotime.Now()+int64(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := read(); err != nil {
		t.Fatalf("read after the lease was renewed: %v", err)
	}
	if err := p.srv.SetLease(rk.Key, 0); err != nil {
		t.Fatal(err)
	}
	if err := read(); err != nil {
		t.Fatalf("read without a lease: %v", err)
	}
	if err := p.srv.SetLease(Key(12345), 1); !errors.Is(err, ErrBadKey) {
		t.Fatalf("lease of an unknown key: %v, want ErrBadKey", err)
	}
}
