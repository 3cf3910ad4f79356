package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/wire"
)

// The fixture cluster: real regions (meganode.Create in a test directory,
// hugepages off) holding real blink trees, the real rdma tcp responder and
// shm server registering them, and a minimal wire responder per server
// answering Metadata, Search, Get, Contains, Put, Delete, Range and Ping
// over real TCP.
//
// Everything the real servers (package server, realserver_test.go) can do
// is tested against them. The fixture covers what they cannot provide
// yet: a tree of several meganodes over several servers (a root inner
// meganode and leaf meganodes: until meganode splits arrive, a server
// holds a single leaf meganode), hooks into the trees (blink's
// MidNodeWrite pause, puts behind the client's back that make its cached
// parents stale), and faults in the RPC path (a connection dropped after
// a write executed, connections killed under load).

// clusterSpec shapes a test cluster.
type clusterSpec struct {
	// servers is the number of servers (regions 1..servers).
	servers int
	// splits, if set, makes the root an inner meganode (level 1) with one
	// leaf meganode per range between consecutive split keys, spread
	// over the servers round-robin. Without splits the root is a single
	// leaf meganode on server 0.
	splits []string
	// nodeSize and meganodeSize default to 512 bytes and 1 MiB.
	nodeSize     int
	meganodeSize uint64
}

type testCluster struct {
	t       testing.TB
	spec    clusterSpec
	servers []*testServer
	root    blink.Ptr
	megas   map[blink.Ptr]*meganode.Meganode // every meganode, by header ptr
}

// serverKnobs are hooks of a test server; nil fields do nothing.
type serverKnobs struct {
	// delay is slept before serving each request of op.
	delay func(op wire.Op) time.Duration
	// drop makes the server read a request of op and close the
	// connection without answering (the request executed if exec).
	drop func(op wire.Op) (drop, exec bool)
}

type testServer struct {
	cl     *testCluster
	idx    int
	region *meganode.Region
	ln     net.Listener
	tcp    *rdma.TCPResponder
	shm    *rdma.SHMServer
	keys   []rdma.RemoteKey
	knobs  atomic.Pointer[serverKnobs]
	served atomic.Uint64 // requests answered
	// retries counts writes flagged wire.FlagRetry, answered Unverifiable.
	retries atomic.Uint64

	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

func newTestCluster(t testing.TB, spec clusterSpec) *testCluster {
	t.Helper()
	if spec.servers == 0 {
		spec.servers = 1
	}
	if spec.nodeSize == 0 {
		spec.nodeSize = 512
	}
	if spec.meganodeSize == 0 {
		spec.meganodeSize = 1 << 20
	}
	cl := &testCluster{t: t, spec: spec, megas: make(map[blink.Ptr]*meganode.Meganode)}
	quiet := slog.New(slog.DiscardHandler)
	for i := range spec.servers {
		reg, err := meganode.Create(meganode.Options{
			ID: uint32(i + 1), Size: 24 << 20, MeganodeSize: spec.meganodeSize, NodeSize: spec.nodeSize,
			Meganodes: 6, Hugepages: meganode.HugepagesOff, Dir: t.TempDir(),
			Name: fmt.Sprintf("region-%d", i+1), Logger: quiet,
		})
		if err != nil {
			t.Fatalf("meganode.Create: %v", err)
		}
		s := &testServer{cl: cl, idx: i, region: reg, conns: make(map[net.Conn]bool)}
		s.knobs.Store(&serverKnobs{})
		cl.servers = append(cl.servers, s)
		t.Cleanup(func() {
			s.stop()
			_ = reg.Close()
		})
	}
	opts := blink.Options{NodeSize: spec.nodeSize}
	if len(spec.splits) == 0 {
		m, err := cl.servers[0].region.NewMeganode(0, blink.Full, opts)
		if err != nil {
			t.Fatal(err)
		}
		cl.megas[m.Ptr()] = m
		cl.root = m.Ptr()
	} else {
		root, err := cl.servers[0].region.NewMeganode(1, blink.Full, opts)
		if err != nil {
			t.Fatal(err)
		}
		cl.megas[root.Ptr()] = root
		cl.root = root.Ptr()
		for i := 0; i <= len(spec.splits); i++ {
			b := blink.Bounds{MinInf: i == 0, MaxInf: i == len(spec.splits)}
			sep := []byte{0}
			if i > 0 {
				b.Min = []byte(spec.splits[i-1])
				sep = b.Min
			}
			if i < len(spec.splits) {
				b.Max = []byte(spec.splits[i])
			}
			leaf, err := cl.servers[i%spec.servers].region.NewMeganode(0, b, opts)
			if err != nil {
				t.Fatal(err)
			}
			cl.megas[leaf.Ptr()] = leaf
			if err := root.Tree().InsertChild(sep, leaf.Ptr()); err != nil {
				t.Fatal(err)
			}
		}
	}
	cl.servers[0].region.SetRoot(cl.root)
	for _, s := range cl.servers {
		s.start(t)
	}
	return cl
}

// start registers the region with both one-sided providers and starts
// serving RPCs.
func (s *testServer) start(t testing.TB) {
	quiet := slog.New(slog.DiscardHandler)
	var err error
	if s.tcp, err = rdma.Listen("127.0.0.1:0", rdma.TCPOptions{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if s.shm, err = rdma.NewSHMServer(rdma.SHMOptions{Dir: t.TempDir(), Slots: 8, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []rdma.Server{s.tcp, s.shm} {
		k, err := p.Register(s.region)
		if err != nil {
			t.Fatal(err)
		}
		s.keys = append(s.keys, k)
	}
	if s.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	s.wg.Add(1)
	go s.accept()
}

func (s *testServer) addr() string { return s.ln.Addr().String() }

// addrs returns the RPC addresses of the cluster's servers.
func (cl *testCluster) addrs() []string {
	var a []string
	for _, s := range cl.servers {
		a = append(a, s.addr())
	}
	return a
}

// stop closes the listener, every connection and the providers, and
// waits for the serving goroutines.
func (s *testServer) stop() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	if s.ln != nil {
		_ = s.ln.Close()
	}
	for nc := range s.conns {
		_ = nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	if s.tcp != nil {
		_ = s.tcp.Close()
	}
	if s.shm != nil {
		_ = s.shm.Close()
	}
}

// killConns closes the server's RPC connections (the server goes on).
func (s *testServer) killConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for nc := range s.conns {
		_ = nc.Close()
	}
}

func (s *testServer) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			return
		}
		s.conns[nc] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(nc)
	}
}

func (s *testServer) serve(nc net.Conn) {
	defer s.wg.Done()
	defer func() {
		_ = nc.Close()
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
	}()
	rd, _ := wire.NewReader(nc, nil)
	rw, _ := wire.NewReplyWriter(nc, nil)
	var handlers sync.WaitGroup
	defer func() {
		handlers.Wait()
		_ = rw.Close()
	}()
	for {
		f, err := rd.ReadFramePooled()
		if err != nil {
			if wire.InSync(err) {
				_ = rw.WriteError(&f.Header, err, 0, 0)
				continue
			}
			return
		}
		arrived := time.Now()
		if k := s.knobs.Load(); k.drop != nil {
			if drop, exec := k.drop(f.Header.Op); drop {
				if exec {
					_, _ = s.dispatch(f.Header.Op, f.Body)
				}
				f.Release()
				return
			}
		}
		handlers.Add(1)
		go func() {
			defer handlers.Done()
			s.handle(rw, f, arrived)
		}()
	}
}

func (s *testServer) handle(rw *wire.ReplyWriter, f wire.Frame, arrived time.Time) {
	defer f.Release()
	if k := s.knobs.Load(); k.delay != nil {
		time.Sleep(k.delay(f.Header.Op))
	}
	if f.Header.Flags&wire.FlagRetry != 0 {
		// No session table here: a retried write cannot be vouched for.
		s.retries.Add(1)
		_ = rw.WriteError(&f.Header, wire.ErrUnverifiable, 0, 0)
		return
	}
	begin := time.Now()
	body, err := s.dispatch(f.Header.Op, f.Body)
	svc := time.Since(begin)
	s.served.Add(1)
	if err != nil {
		_ = rw.WriteError(&f.Header, err, begin.Sub(arrived), svc)
		return
	}
	h := f.Header.Reply(wire.StatusOK)
	h.SetTiming(begin.Sub(arrived), svc)
	_ = rw.Write(h, body)
}

// dispatch executes one request and returns its reply body.
func (s *testServer) dispatch(op wire.Op, body []byte) ([]byte, error) {
	switch op {
	case wire.OpPing:
		return body, nil
	case wire.OpMetadata:
		return s.metadata(), nil
	case wire.OpSearch:
		var req wire.SearchRequest
		if err := req.Decode(body); err != nil {
			return nil, err
		}
		return s.search(&req)
	case wire.OpGet, wire.OpContains:
		var req wire.GetRequest
		if err := req.Decode(body); err != nil {
			return nil, err
		}
		m, err := s.leafFor(req.Ptr, req.Key)
		if err != nil {
			return nil, err
		}
		v, err := m.Tree().Get(req.Key, nil)
		if op == wire.OpContains {
			if err != nil && !errors.Is(err, blink.ErrNotFound) {
				return nil, mapErr(err)
			}
			r := wire.ContainsReply{Found: err == nil}
			return r.AppendTo(nil), nil
		}
		if err != nil {
			return nil, mapErr(err)
		}
		r := wire.GetReply{Value: v}
		return r.AppendTo(nil), nil
	case wire.OpPut:
		var req wire.PutRequest
		if err := req.Decode(body); err != nil {
			return nil, err
		}
		m, err := s.leafFor(req.Ptr, req.Key)
		if err != nil {
			return nil, err
		}
		return nil, mapErr(m.Tree().Put(req.Key, req.Value))
	case wire.OpDelete:
		var req wire.DeleteRequest
		if err := req.Decode(body); err != nil {
			return nil, err
		}
		m, err := s.leafFor(req.Ptr, req.Key)
		if err != nil {
			return nil, err
		}
		ok, err := m.Tree().Delete(req.Key)
		if err != nil {
			return nil, mapErr(err)
		}
		if !ok {
			return nil, wire.ErrNotFound
		}
		return nil, nil
	case wire.OpRange:
		var req wire.RangeRequest
		if err := req.Decode(body); err != nil {
			return nil, err
		}
		return s.scan(&req)
	}
	return nil, wire.ErrUnknownOp
}

func (s *testServer) metadata() []byte {
	keys, _ := json.Marshal(s.keys)
	host, _ := rdma.HostID()
	m := wire.MetadataReply{
		Server:       fmt.Sprintf("test-%d", s.idx),
		NodeSize:     uint32(s.cl.spec.nodeSize),
		MeganodeSize: s.cl.spec.meganodeSize,
		Root:         s.cl.root,
		Hints:        wire.SelectorHints{Workers: 1},
		Regions: []wire.RegionInfo{{
			ID: s.region.ID(), Epoch: 1, Size: uint64(len(s.region.Bytes())), RemoteKey: uint64(s.keys[0].Key),
			Host: host, RPCAddr: s.addr(), ReadAddr: string(keys), Path: s.region.Path(),
		}},
	}
	return m.AppendTo(nil)
}

// meganodeAt returns the local meganode whose memory holds p (nil: root).
func (s *testServer) meganodeAt(p blink.Ptr) (*meganode.Meganode, error) {
	if p.IsNil() {
		p = s.cl.root
	}
	if p.Region() != s.region.ID() {
		return nil, s.wrongServer(p)
	}
	slot, ok := s.region.SlotOf(p)
	if !ok {
		return nil, wire.ErrOutOfBounds
	}
	m := s.cl.megas[blink.MakePtr(s.region.ID(), s.region.Layout().SlotBase(slot))]
	if m == nil {
		return nil, wire.ErrOutOfBounds
	}
	return m, nil
}

func (s *testServer) wrongServer(p blink.Ptr) error {
	for _, o := range s.cl.servers {
		if o.region.ID() == p.Region() {
			return &wire.StatusError{Status: wire.StatusWrongServer, Leader: o.addr(), Region: p.Region()}
		}
	}
	return wire.ErrUnknownRegion
}

func header(m *meganode.Meganode) wire.Meganode {
	h, _ := m.Tree().Header()
	return wire.Meganode{
		Ptr: m.Ptr(), Level: uint16(h.Level), Height: uint16(h.Height),
		Range: wire.KeyRange{Min: h.Bounds.Min, Max: h.Bounds.Max, MinInf: h.Bounds.MinInf, MaxInf: h.Bounds.MaxInf},
	}
}

// search is one meganode hop.
func (s *testServer) search(req *wire.SearchRequest) ([]byte, error) {
	m, err := s.meganodeAt(req.Ptr)
	if err != nil {
		return nil, err
	}
	res, err := m.Tree().Search(req.Key)
	if err != nil {
		return nil, mapErr(err)
	}
	rep := wire.SearchReply{Meganode: header(m)}
	switch {
	case !res.Next.IsNil():
		rep.Kind, rep.Next = wire.SearchNext, res.Next
	case rep.Meganode.Level > 0:
		rep.Kind, rep.Next = wire.SearchNext, res.Child
	default:
		rep.Kind, rep.Found = wire.SearchLeaf, res.Found
		if res.Found && req.WantValue {
			v, err := m.Tree().Get(req.Key, nil)
			if errors.Is(err, blink.ErrNotFound) {
				rep.Found = false
			} else if err != nil {
				return nil, mapErr(err)
			} else {
				rep.HasValue, rep.Value = true, v
			}
		}
	}
	return rep.AppendTo(nil), nil
}

// leafFor follows the meganodes from p down to the leaf meganode of key;
// a leaf meganode on another server is a redirect.
func (s *testServer) leafFor(p blink.Ptr, key []byte) (*meganode.Meganode, error) {
	for {
		m, err := s.meganodeAt(p)
		if err != nil {
			return nil, err
		}
		h, _ := m.Tree().Header()
		if h.Level == 0 {
			return m, nil
		}
		res, err := m.Tree().Search(key)
		if err != nil {
			return nil, mapErr(err)
		}
		p = res.Child
		if !res.Next.IsNil() {
			p = res.Next
		}
	}
}

// scan serves a range inside one leaf meganode, stopping at its boundary
// with Next set to the neighbour meganode. When the range starts in a
// meganode of another server it answers with no pairs and Next pointing
// there (a routing hop, like SearchNext).
func (s *testServer) scan(req *wire.RangeRequest) ([]byte, error) {
	key := req.Start
	if req.Reverse {
		key = req.End
	}
	m := s.cl.leafOf(key, req.Reverse)
	var rep wire.RangeReply
	if m.Region() != s.region {
		rep.More, rep.Resume, rep.Next = true, bytes.Clone(key), m.Ptr()
		return rep.AppendTo(nil), nil
	}
	h, _ := m.Tree().Header()
	lo, hi := req.Start, req.End
	if !h.Bounds.MinInf && (lo == nil || bytes.Compare(lo, h.Bounds.Min) < 0) {
		lo = h.Bounds.Min
	}
	if !h.Bounds.MaxInf && (hi == nil || bytes.Compare(hi, h.Bounds.Max) > 0) {
		hi = h.Bounds.Max
	}
	limit := int(req.Limit)
	n := 0
	err := m.Tree().Scan(blink.ScanOptions{Lower: lo, Upper: hi, Reverse: req.Reverse}, func(k, v []byte) bool {
		if limit > 0 && n == limit {
			rep.More = true
			rep.Resume = bytes.Clone(k)
			if req.Reverse {
				rep.Resume = append(rep.Resume, 0) // End is exclusive
			}
			return false
		}
		n++
		if req.KeysOnly {
			v = nil
		}
		rep.Pairs = append(rep.Pairs, wire.KV{Key: bytes.Clone(k), Value: bytes.Clone(v)})
		return true
	})
	if err != nil {
		return nil, mapErr(err)
	}
	if !rep.More {
		// The meganode is done; does the range go on beyond it?
		if !req.Reverse && !h.Bounds.MaxInf && (req.EndUnbounded || bytes.Compare(req.End, h.Bounds.Max) > 0) {
			rep.More, rep.Resume = true, bytes.Clone(h.Bounds.Max)
			rep.Next = s.cl.leafOf(rep.Resume, false).Ptr()
		}
		if req.Reverse && !h.Bounds.MinInf && (req.StartUnbounded || bytes.Compare(req.Start, h.Bounds.Min) < 0) {
			rep.More, rep.Resume = true, bytes.Clone(h.Bounds.Min)
			rep.Next = s.cl.leafOf(rep.Resume, true).Ptr()
		}
	}
	return rep.AppendTo(nil), nil
}

// leafOf returns the leaf meganode holding key, or for below (reverse
// ranges, whose end is exclusive) the one holding the keys just below
// key. A nil key is the leftmost (rightmost for below) meganode.
func (cl *testCluster) leafOf(key []byte, below bool) *meganode.Meganode {
	for _, m := range cl.megas {
		h, _ := m.Tree().Header()
		if h.Level != 0 {
			continue
		}
		b := h.Bounds
		var in bool
		switch {
		case key == nil:
			in = !below && b.MinInf || below && b.MaxInf
		case below:
			in = (b.MinInf || bytes.Compare(b.Min, key) < 0) && (b.MaxInf || bytes.Compare(key, b.Max) <= 0)
		default:
			in = (b.MinInf || bytes.Compare(b.Min, key) <= 0) && (b.MaxInf || bytes.Compare(key, b.Max) < 0)
		}
		if in {
			return m
		}
	}
	panic(fmt.Sprintf("no leaf meganode for %q", key))
}

// mapErr turns blink errors into wire statuses.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, blink.ErrNotFound):
		return wire.ErrNotFound
	case errors.Is(err, blink.ErrKeyTooLarge):
		return fmt.Errorf("%w: %w", wire.ErrKeyTooLarge, err)
	case errors.Is(err, blink.ErrValueTooLarge):
		return fmt.Errorf("%w: %w", wire.ErrValueTooLarge, err)
	case errors.Is(err, blink.ErrEmptyKey):
		return wire.ErrEmptyKey
	case errors.Is(err, blink.ErrKeyOutOfRange):
		return wire.ErrKeyOutOfRange
	case errors.Is(err, blink.ErrRestart):
		return wire.ErrNeedsRetry
	}
	return fmt.Errorf("%w: %w", wire.ErrInternal, err)
}
