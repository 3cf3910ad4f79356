//go:build libfabric && cgo

package rdma

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cellstore/cell/internal/monotime"
)

// FabricClient is the client side of the fabric provider. Reads land in
// a registered landing area (C-side memory the provider may write until
// the read completes, whatever happens to the op) and are copied to their
// destinations once judged; so a cancelled op's destination is never
// written late. Post posts an op's reads from the caller's goroutine, in
// one batch; one goroutine (the reaper) takes completions in batches,
// posts the check reads, retries what the provider refused for now
// (EAGAIN: a full queue, a connection being made) and exchanges clock
// readings with servers. doc.go describes the protocol.
type FabricClient struct {
	opts FabricClientOptions
	end  *fabricEnd
	prov string // the libfabric provider in use
	addr string // this endpoint's raw address

	arena               []byte // landing slots, landing chunks, message buffers
	mr                  fabricMR
	ctxs                *fabricContexts
	small, large, chunk int
	largeBase, msgBase  int
	nRecv, nSend        int

	waits   bool // the reaper may wait in the completion queue
	fused   int  // the most ranges of a read that carries its check; 0: none
	closing atomic.Bool
	polling sync.RWMutex // held for reading by readers polling the queue, for writing by Close
	poller  sync.Mutex   // held by the synchronous reader polling the queue
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	pool    sync.Pool // *fabricSync, for Read and ReadV

	mu struct {
		sync.Mutex
		closed    bool
		sleeping  bool // the reaper waits on wake
		waiting   bool // the reaper waits in the completion queue
		smallFree []int32
		largeFree []int32
		ctxFree   []int32
		ctxUse    []ctxUse
		sendFree  []int
		regs      map[RemoteKey]*fabricRegState
		peers     map[peerID]*fabricPeer
		nonces    map[uint64]*fabricPeer
		gone      map[peerID]int64 // servers given up, until when (monotime)
		all       []*fabricOp      // live ops
		free      []*fabricOp
		pending   []*fabricOp       // ops with reads to post again
		spare     []*fabricOp       // pending's other buffer
		verify    []*fabricRegState // registrations to verify
		room      []*fabricOp       // ops waiting for landing room
		later     []*fabricOp       // ops whose check is posted again at retryAt
		checkRegs []*fabricRegState // registrations with ops waiting for a check read
		checkFree []*fabricCheck
		inflight  int // reads and sends posted, not completed
		batch     []fabricRead
		owners    []batchOwner
	}
}

var _ Client = (*FabricClient)(nil)

// Kinds of posted work (ctxUse.kind, batchOwner.kind).
const (
	useFree = iota
	useData
	useCheck
	useVerify
	useSend
	useFused // data and check in one read
)

type ctxUse struct {
	kind  uint8
	seg   int32
	op    *fabricOp
	reg   *fabricRegState
	check *fabricCheck
	peer  *fabricPeer
	buf   int // send buffer
}

type batchOwner struct {
	kind  uint8
	seg   int32
	ctx   int32
	op    *fabricOp
	reg   *fabricRegState
	check *fabricCheck
}

// fabricCheck is one check read: a registration's slot, read once the
// data of every op in ops has landed, which judges them all. Its slot
// lands in the first op's landing space, after that op's data.
type fabricCheck struct {
	reg *fabricRegState
	ops []*fabricOp
}

type peerID struct {
	addr        string
	incarnation uint64
}

// fabricPeer is a server endpoint the client reads.
type fabricPeer struct {
	id       peerID
	fa       uint64 // its address vector entry
	regs     int    // registrations naming it
	sync     clockSync
	nonce    uint64 // of the clock request in flight, 0 if none
	sentAt   int64
	want     bool // a clock request is to be sent
	waiting  []*fabricOp
	sendBusy bool
	tries    int // clock requests sent without a reply
	dead     bool
}

// States of a registration as this client knows it.
const (
	regNew       = iota // not verified yet
	regVerifying        // its slot is being read
	regVerified         // its slot held its key: length known
	regFailed           // revoked or unknown: err says which
)

// fabricRegState is one RemoteKey the client has read with.
type fabricRegState struct {
	rk      RemoteKey
	desc    fabricDesc
	peer    *fabricPeer
	state   int
	length  uint64
	err     error
	waiting []*fabricOp
	land    int32 // small slot of the verify read
	users   int
	queued  bool
	// checkWait are the ops whose data landed, waiting for a check read;
	// checkQueued: the registration is in checkRegs.
	checkWait   []*fabricOp
	checkQueued bool
}

// fabricOp is the provider's side of one post of an Op.
type fabricOp struct {
	op         *Op
	gen        uint64
	reg        *fabricRegState
	segs       []Segment
	total      int
	land       int32 // landing slot or chunk
	large      bool
	landOff    int // arena offset of the landing space
	next       int // next segment to post
	nextOff    int // its landing offset
	posted     int // reads posted
	done       int // reads completed
	check      bool
	checkQ     bool // check read to post
	queued     bool // in pending
	err        error
	checkAt    int64  // when the check read completed
	lease      uint64 // the lease its check read found, while waiting for a clock
	checkTries int    // check reads that failed after the data failed
	retryAt    int64  // when to post the check again
	startAt    int64  // when it was posted
	index      int    // in all
}

// Message buffers of a client.
const (
	fabricClientRecvs = 8
	fabricClientSends = 8
	fabricClientCtxs  = 4096
	fabricSyncRetry   = 250 * time.Millisecond
	maxFabricRegs     = 4096
)

// NewFabricClient opens an RDM endpoint of opts.Provider and registers
// its landing area.
func NewFabricClient(opts FabricClientOptions) (*FabricClient, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	prof := fabricProfileOf(opts.Provider)
	removeStaleFabricSHM(prof.libfabric, opts.Logger)
	end, err := openFabric(prof.libfabric, opts.Node, "", false)
	if err != nil {
		return nil, fmt.Errorf("rdma: fabric provider %q: %w: %w", prof.libfabric, err, ErrUnsupported)
	}
	c := &FabricClient{opts: opts, end: end, prov: end.provider(), addr: end.address(),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	c.small, c.large, c.chunk = landingLayout(opts.LandingBytes, opts.MaxReadLen)
	c.largeBase = c.small * landingSmall
	c.msgBase = c.largeBase + c.large*c.chunk
	c.nRecv, c.nSend = fabricClientRecvs, fabricClientSends
	c.waits = end.hasWait() && prof.waits
	if prof.fused && !opts.TestingKnobs.SeparateChecks && opts.TestingKnobs.AfterCopy == nil {
		c.fused = end.rmaIOVLimit()
	}
	if err := c.setup(); err != nil {
		c.release()
		return nil, err
	}
	fabricClients.Lock()
	fabricClients.m[c] = struct{}{}
	fabricClients.Unlock()
	go c.reap()
	return c, nil
}

func (c *FabricClient) setup() error {
	var err error
	if c.arena, err = anonMap(c.msgBase + (c.nRecv+c.nSend)*fabricMsgBuffer); err != nil {
		return err
	}
	if c.mr, err = c.end.register(unsafe.Pointer(&c.arena[0]), len(c.arena), accessLocal, 0); err != nil {
		return fmt.Errorf("rdma: register the fabric landing area: %w", err)
	}
	c.ctxs = newFabricContexts(c.nRecv + c.nSend + fabricClientCtxs)
	m := &c.mu
	m.regs = make(map[RemoteKey]*fabricRegState)
	m.peers = make(map[peerID]*fabricPeer)
	m.nonces = make(map[uint64]*fabricPeer)
	m.gone = make(map[peerID]int64)
	m.ctxUse = make([]ctxUse, c.ctxs.n)
	for i := c.ctxs.n - 1; i >= c.nRecv+c.nSend; i-- {
		m.ctxFree = append(m.ctxFree, int32(i))
	}
	for i := c.small - 1; i >= 0; i-- {
		m.smallFree = append(m.smallFree, int32(i))
	}
	for i := c.large - 1; i >= 0; i-- {
		m.largeFree = append(m.largeFree, int32(i))
	}
	for i := range c.nSend {
		m.sendFree = append(m.sendFree, c.nRecv+i)
	}
	for i := range c.nRecv {
		if rc := c.end.postRecv(c.msgBuf(i), fabricMsgBuffer, c.mr.desc, c.ctxs.ptr(i)); rc != 0 {
			return fmt.Errorf("rdma: post a receive: %w", fabErr("fi_recv", rc))
		}
	}
	return nil
}

func (c *FabricClient) release() {
	_ = c.mr.close()
	c.end.close()
	if c.ctxs != nil {
		c.ctxs.free()
	}
	_ = unmap(c.arena)
	c.arena = nil
}

func (c *FabricClient) msgBuf(i int) unsafe.Pointer {
	return unsafe.Pointer(&c.arena[c.msgBase+i*fabricMsgBuffer])
}

func (c *FabricClient) ptr(off int) unsafe.Pointer { return unsafe.Pointer(&c.arena[off]) }

// Provider returns "fabric".
func (c *FabricClient) Provider() string { return ProviderFabric }

// Caps returns the provider's capabilities with the client's limits.
func (c *FabricClient) Caps() Caps { return fabricCaps(c.opts.Provider, c.opts.Limits) }

// LibfabricProvider returns the libfabric provider in use.
func (c *FabricClient) LibfabricProvider() string { return c.prov }

// fabricSync is a pooled op and queue for Read and ReadV, and room for
// the completions its reader takes while it polls.
type fabricSync struct {
	op  Op
	cq  *CQ
	one [1]Segment
	es  [16]fabricCompletion
}

// Read implements Client.
func (c *FabricClient) Read(ctx context.Context, rk *RemoteKey, off uint64, dst []byte) error {
	s := c.getSync()
	s.one[0] = Segment{Off: off, Dst: dst}
	err := c.readSync(ctx, s, rk, s.one[:])
	s.one[0] = Segment{}
	c.pool.Put(s)
	return err
}

// ReadV implements Client.
func (c *FabricClient) ReadV(ctx context.Context, rk *RemoteKey, segs []Segment) error {
	if len(segs) == 0 {
		return nil
	}
	s := c.getSync()
	err := c.readSync(ctx, s, rk, segs)
	c.pool.Put(s)
	return err
}

func (c *FabricClient) getSync() *fabricSync {
	if s, ok := c.pool.Get().(*fabricSync); ok {
		return s
	}
	return &fabricSync{cq: NewCQ(1)}
}

// readSync posts one op and polls the completion queue itself for a
// while (a read is a few microseconds; handing it to the reaper costs
// goroutine switches), then leaves it to the reaper.
func (c *FabricClient) readSync(ctx context.Context, s *fabricSync, rk *RemoteKey, segs []Segment) error {
	s.op.PrepareV(rk, segs)
	if err := c.post(ctx, &s.op, s.cq, false); err != nil {
		return err
	}
	op := s.cq.Poll()
	// One reader at a time polls; the others wait for it (or the reaper)
	// to complete their ops.
	if op == nil && c.poller.TryLock() {
		for start := monotime.Now(); op == nil && monotime.Now()-start <= int64(fabricSpin) && c.pollOnce(s.es[:]); {
			op = s.cq.Poll()
		}
		c.poller.Unlock()
		c.mu.Lock()
		if op == nil || c.mu.inflight > 0 {
			c.wakeLocked()
		}
		c.mu.Unlock()
	} else if op == nil {
		c.mu.Lock()
		c.wakeLocked()
		c.mu.Unlock()
	}
	if op == nil {
		op, _ = s.cq.Wait(context.Background()) // the op completes when ctx ends
	}
	err := op.Err()
	s.op.Remote, s.op.Segs = nil, nil
	return err
}

// pollOnce takes the completions there are and posts what waits, as the
// reaper does; false once the client is closing.
func (c *FabricClient) pollOnce(es []fabricCompletion) bool {
	if !c.polling.TryRLock() {
		return false
	}
	defer c.polling.RUnlock()
	if c.closing.Load() {
		return false
	}
	n, err := c.end.reap(es, 0)
	if err != nil {
		return false
	}
	now := monotime.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return false
	}
	for i := range n {
		c.completeLocked(&es[i], now)
	}
	c.retryLocked(now)
	c.flushLocked()
	return true
}

// Post implements Client.
func (c *FabricClient) Post(ctx context.Context, op *Op, cq *CQ) error {
	return c.post(ctx, op, cq, true)
}

// post posts op; wake: wake the reaper if it sleeps (a synchronous
// reader polls first).
func (c *FabricClient) post(ctx context.Context, op *Op, cq *CQ, wake bool) error {
	if c.closing.Load() {
		return ErrClosed
	}
	rk := op.Remote
	if rk == nil || rk.Provider != ProviderFabric {
		return wrongProvider(ProviderFabric, rk)
	}
	total, err := checkSegments(op.Segs, rk.Len, &c.opts.Limits)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctxErr(ctx)
	default:
	}
	gen, err := op.begin(cq)
	if err != nil {
		return err
	}
	if total == 0 {
		op.complete(nil)
		return nil
	}
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		op.abort()
		return ErrClosed
	}
	reg, err := c.regLocked(rk)
	if err == nil && reg.state == regFailed {
		err = reg.err
	}
	if err == nil && reg.state == regVerified {
		err = boundsErr(op.Segs, reg.length)
	}
	if err != nil {
		c.mu.Unlock()
		op.abort()
		return err
	}
	f := c.newOpLocked(op, gen, reg, total)
	switch reg.state {
	case regVerified:
		c.startLocked(f)
	default:
		reg.waiting = append(reg.waiting, f)
		if reg.state == regNew {
			c.queueVerifyLocked(reg)
		}
	}
	c.flushLocked()
	if wake {
		c.wakeLocked()
	}
	c.mu.Unlock()
	op.watch(ctx, gen, c)
	return nil
}

// cancelOp implements canceller: the op completes with err at once; its
// reads, if posted, run to their end into the landing area, which is freed
// then.
func (c *FabricClient) cancelOp(op *Op, gen uint64, err error) {
	if op.cancel(gen) {
		op.complete(err)
	}
}

// boundsErr checks segs against a registration's length as its slot gave
// it (the server's word, not the RemoteKey's).
func boundsErr(segs []Segment, length uint64) error {
	for i := range segs {
		if st := checkRange(segs[i].Off, uint64(len(segs[i].Dst)), length); st != statusOK {
			return fmt.Errorf("rdma: fabric read of %d bytes at %d: registered length %d: %w", len(segs[i].Dst), segs[i].Off, length, ErrOutOfBounds)
		}
	}
	return nil
}

// regLocked returns the state of rk, creating it (and its peer) on first
// use.
func (c *FabricClient) regLocked(rk *RemoteKey) (*fabricRegState, error) {
	if r := c.mu.regs[*rk]; r != nil {
		return r, nil
	}
	d, err := parseFabricDesc(rk.Desc)
	if err != nil {
		return nil, err
	}
	if d.provider != c.prov {
		return nil, fmt.Errorf("rdma: region %d is registered with libfabric provider %q, this client uses %q: %w", rk.Region, d.provider, c.prov, ErrBadKey)
	}
	id := peerID{addr: d.addr, incarnation: d.incarnation}
	if until, ok := c.mu.gone[id]; ok {
		if monotime.Now() < until {
			return nil, fmt.Errorf("rdma: fabric server %s of region %d was given up: %w", rk.Addr, rk.Region, ErrDisconnected)
		}
		delete(c.mu.gone, id)
	}
	p := c.mu.peers[id]
	if p == nil {
		fa, err := c.end.avInsert(d.addr)
		if err != nil {
			return nil, fmt.Errorf("rdma: fabric peer %s: %w: %w", rk.Addr, err, ErrBadKey)
		}
		p = &fabricPeer{id: id, fa: fa}
		c.mu.peers[id] = p
	}
	if len(c.mu.regs) >= maxFabricRegs {
		c.evictLocked()
	}
	r := &fabricRegState{rk: *rk, desc: d, peer: p, land: -1}
	p.regs++
	c.mu.regs[*rk] = r
	return r, nil
}

// evictLocked forgets the registrations no op uses, and the peers no
// registration names.
func (c *FabricClient) evictLocked() {
	for k, r := range c.mu.regs {
		if r.users == 0 && r.state != regVerifying && !r.queued {
			delete(c.mu.regs, k)
			r.peer.regs--
		}
	}
	for id, p := range c.mu.peers {
		if p.regs == 0 && p.nonce == 0 && len(p.waiting) == 0 && !p.sendBusy {
			_ = c.end.avRemove(p.fa)
			delete(c.mu.peers, id)
		}
	}
}

func (c *FabricClient) newOpLocked(op *Op, gen uint64, reg *fabricRegState, total int) *fabricOp {
	var f *fabricOp
	if n := len(c.mu.free); n > 0 {
		f = c.mu.free[n-1]
		c.mu.free = c.mu.free[:n-1]
	} else {
		f = new(fabricOp)
	}
	*f = fabricOp{op: op, gen: gen, reg: reg, segs: op.Segs, total: total, land: -1, index: len(c.mu.all), startAt: monotime.Now()}
	c.mu.all = append(c.mu.all, f)
	reg.users++
	return f
}

// freeOpLocked releases f. REQUIRES: none of its reads is in flight.
func (c *FabricClient) freeOpLocked(f *fabricOp) {
	if f.land >= 0 {
		if f.large {
			c.mu.largeFree = append(c.mu.largeFree, f.land)
		} else {
			c.mu.smallFree = append(c.mu.smallFree, f.land)
		}
		f.land = -1
		c.roomLocked()
	}
	last := c.mu.all[len(c.mu.all)-1]
	c.mu.all[f.index] = last
	last.index = f.index
	c.mu.all = c.mu.all[:len(c.mu.all)-1]
	f.reg.users--
	*f = fabricOp{land: -1}
	c.mu.free = append(c.mu.free, f)
}

// claimGen moves post gen of op from posted to claimed; false if that post
// is no longer posted (a cancellation won, or the op was completed and
// posted again). For providers whose work on a post may outlive it (the
// fabric client's reads after a cancellation).
func (op *Op) claimGen(gen uint64) bool {
	return op.state.CompareAndSwap(gen<<phaseBits|opPosted, gen<<phaseBits|opClaimed)
}

// posted reports whether post gen of op is still posted.
func (op *Op) posted(gen uint64) bool { return op.state.Load() == gen<<phaseBits|opPosted }

// live reports whether f's post is still the op's (not cancelled).
func (f *fabricOp) live() bool { return f.op.posted(f.gen) }

// finishLocked completes f's op with err (if its post is still live) and
// frees f. On success the landed bytes are copied to the destinations.
func (c *FabricClient) finishLocked(f *fabricOp, err error) {
	if f.op.claimGen(f.gen) {
		if err == nil {
			off := f.landOff
			for i := range f.segs {
				n := len(f.segs[i].Dst)
				copy(f.segs[i].Dst, c.arena[off:off+n])
				off += n
			}
		}
		f.op.complete(err)
	}
	c.freeOpLocked(f)
}

// startLocked gives f its landing space and posts its reads, or queues it
// until there is room.
func (c *FabricClient) startLocked(f *fabricOp) {
	if !f.live() {
		c.freeOpLocked(f)
		return
	}
	need := f.total + fabricCheckLen
	switch {
	case need <= landingSmall && len(c.mu.smallFree) > 0:
		n := len(c.mu.smallFree)
		f.land, f.large = c.mu.smallFree[n-1], false
		c.mu.smallFree = c.mu.smallFree[:n-1]
		f.landOff = int(f.land) * landingSmall
	case need > landingSmall && len(c.mu.largeFree) > 0:
		n := len(c.mu.largeFree)
		f.land, f.large = c.mu.largeFree[n-1], true
		c.mu.largeFree = c.mu.largeFree[:n-1]
		f.landOff = c.largeBase + int(f.land)*c.chunk
	default:
		c.mu.room = append(c.mu.room, f)
		return
	}
	f.nextOff = f.landOff
	c.addDataLocked(f)
}

// roomLocked starts the ops waiting for landing room, while there is some.
func (c *FabricClient) roomLocked() {
	for len(c.mu.room) > 0 {
		f := c.mu.room[0]
		small := f.total+fabricCheckLen <= landingSmall
		if small && len(c.mu.smallFree) == 0 || !small && len(c.mu.largeFree) == 0 {
			if f.live() {
				return
			}
		}
		c.mu.room = c.mu.room[1:]
		c.startLocked(f)
	}
}

// takeCtxLocked takes a free context, or -1.
func (c *FabricClient) takeCtxLocked() int32 {
	n := len(c.mu.ctxFree)
	if n == 0 {
		return -1
	}
	i := c.mu.ctxFree[n-1]
	c.mu.ctxFree = c.mu.ctxFree[:n-1]
	return i
}

// addDataLocked adds f's unposted reads to the batch; with no context
// left, f waits in pending. With a provider that copies the ranges of a
// read in order, an op of few enough ranges is one read, its check (the
// slot) the last range.
func (c *FabricClient) addDataLocked(f *fabricOp) {
	d := &f.reg.desc
	if f.next == 0 && c.fused > 0 && c.addFusedLocked(f) {
		return
	}
	for ; f.next < len(f.segs); f.next++ {
		s := &f.segs[f.next]
		n := len(s.Dst)
		if n == 0 {
			continue
		}
		ctx := c.takeCtxLocked()
		if ctx < 0 {
			c.pendLocked(f)
			return
		}
		c.mu.batch = append(c.mu.batch, makeRead(c.ptr(f.nextOff), c.mr.desc, n, f.reg.peer.fa, d.base+s.Off, d.key, c.ctxs.ptr(int(ctx))))
		c.mu.owners = append(c.mu.owners, batchOwner{kind: useData, seg: int32(f.next), ctx: ctx, op: f})
		f.nextOff += n
		f.posted++
	}
}

// addFusedLocked adds f as one read of its ranges and its slot, if it
// has few enough ranges; false if not.
func (c *FabricClient) addFusedLocked(f *fabricOp) bool {
	n := 1 // the slot
	for i := range f.segs {
		if len(f.segs[i].Dst) > 0 {
			n++
		}
	}
	if n > c.fused {
		return false
	}
	ctx := c.takeCtxLocked()
	if ctx < 0 {
		c.pendLocked(f)
		return true
	}
	r, d := f.reg, &f.reg.desc
	rd := makeRead(c.ptr(f.landOff), c.mr.desc, 0, r.peer.fa, 0, 0, c.ctxs.ptr(int(ctx)))
	rd.nrma = 0
	for i := range f.segs {
		if k := len(f.segs[i].Dst); k > 0 {
			addRange(&rd, k, d.base+f.segs[i].Off, d.key)
		}
	}
	addRange(&rd, fabricCheckLen, d.tbase+fabricSlotOffset(r.rk.Slot), d.tableKey)
	c.mu.batch = append(c.mu.batch, rd)
	c.mu.owners = append(c.mu.owners, batchOwner{kind: useFused, ctx: ctx, op: f})
	f.next, f.nextOff = len(f.segs), f.landOff+f.total
	f.check = true
	f.posted++
	return true
}

// addCheckLocked makes f wait for a check read of its registration's
// slot: one read, posted at the next flush, checks every op of the
// registration whose data has landed by then.
func (c *FabricClient) addCheckLocked(f *fabricOp) {
	f.checkQ = true
	r := f.reg
	r.checkWait = append(r.checkWait, f)
	if !r.checkQueued {
		r.checkQueued = true
		c.mu.checkRegs = append(c.mu.checkRegs, r)
	}
}

// newCheckLocked returns a free check of r.
func (c *FabricClient) newCheckLocked(r *fabricRegState) *fabricCheck {
	if n := len(c.mu.checkFree); n > 0 {
		chk := c.mu.checkFree[n-1]
		c.mu.checkFree = c.mu.checkFree[:n-1]
		chk.reg = r
		return chk
	}
	return &fabricCheck{reg: r}
}

// freeCheckLocked returns chk to the free list.
func (c *FabricClient) freeCheckLocked(chk *fabricCheck) {
	clear(chk.ops)
	chk.ops, chk.reg = chk.ops[:0], nil
	c.mu.checkFree = append(c.mu.checkFree, chk)
}

// addChecksLocked adds to the batch a check read for each registration
// with ops waiting for one.
func (c *FabricClient) addChecksLocked() {
	regs := c.mu.checkRegs
	keep := regs[:0]
	for _, r := range regs {
		ops := r.checkWait[:0]
		for _, f := range r.checkWait {
			if f.live() && !r.peer.dead {
				ops = append(ops, f)
			} else {
				c.freeOpLocked(f) // nothing in flight: it waited for its check
			}
		}
		if len(ops) == 0 {
			r.checkWait, r.checkQueued = ops, false
			continue
		}
		ctx := c.takeCtxLocked()
		if ctx < 0 {
			r.checkWait = ops
			keep = append(keep, r)
			continue
		}
		chk := c.newCheckLocked(r)
		// The registration keeps the check's old list, emptied, for the
		// next ops: no allocation per check.
		chk.ops, r.checkWait = append(chk.ops, ops...), ops[:0]
		r.checkQueued = false
		ops = chk.ops
		for _, f := range ops {
			f.checkQ = false
			f.posted++
		}
		f := ops[0]
		c.mu.batch = append(c.mu.batch, makeRead(c.ptr(f.landOff+f.total), c.mr.desc, fabricCheckLen, r.peer.fa,
			r.desc.tbase+fabricSlotOffset(r.rk.Slot), r.desc.tableKey, c.ctxs.ptr(int(ctx))))
		c.mu.owners = append(c.mu.owners, batchOwner{kind: useCheck, ctx: ctx, check: chk})
	}
	clear(regs[len(keep):])
	c.mu.checkRegs = keep
}

func (c *FabricClient) pendLocked(f *fabricOp) {
	if !f.queued {
		f.queued = true
		c.mu.pending = append(c.mu.pending, f)
	}
}

// queueVerifyLocked asks for r's slot to be read before its first read.
func (c *FabricClient) queueVerifyLocked(r *fabricRegState) {
	r.state = regVerifying
	if !c.addVerifyLocked(r) && !r.queued {
		r.queued = true
		c.mu.verify = append(c.mu.verify, r)
	}
}

// addVerifyLocked adds r's verify read to the batch; false when there is
// no room for it now.
func (c *FabricClient) addVerifyLocked(r *fabricRegState) bool {
	if r.peer.dead {
		return true // given up: its waiting reads have failed
	}
	if len(c.mu.smallFree) == 0 || len(c.mu.ctxFree) == 0 {
		return false
	}
	n := len(c.mu.smallFree)
	r.land = c.mu.smallFree[n-1]
	c.mu.smallFree = c.mu.smallFree[:n-1]
	ctx := c.takeCtxLocked()
	c.mu.batch = append(c.mu.batch, makeRead(c.ptr(int(r.land)*landingSmall), c.mr.desc, fabricCheckLen, r.peer.fa,
		r.desc.tbase+fabricSlotOffset(r.rk.Slot), r.desc.tableKey, c.ctxs.ptr(int(ctx))))
	c.mu.owners = append(c.mu.owners, batchOwner{kind: useVerify, ctx: ctx, reg: r})
	return true
}

// flushLocked posts the batch. Reads the provider refuses for now go back
// to their queues (from the first refused one of each op); any other
// refusal fails the op once its posted reads are back. Failing an op may
// start others (landing room): their reads are posted in the next round.
func (c *FabricClient) flushLocked() {
	if len(c.mu.checkRegs) > 0 {
		c.addChecksLocked()
	}
	for len(c.mu.batch) > 0 {
		k := len(c.mu.batch)
		c.postBatchLocked(k)
		c.mu.batch = append(c.mu.batch[:0], c.mu.batch[k:]...)
		c.mu.owners = append(c.mu.owners[:0], c.mu.owners[k:]...)
	}
}

// postBatchLocked posts the first k reads of the batch.
func (c *FabricClient) postBatchLocked(k int) {
	n, rc := c.end.postReads(c.mu.batch[:k])
	for i := range n {
		o := &c.mu.owners[i]
		c.mu.ctxUse[o.ctx] = ctxUse{kind: o.kind, seg: o.seg, op: o.op, reg: o.reg, check: o.check}
		c.mu.inflight++
	}
	var perr error
	if rc != 0 && rc != errAgain {
		perr = fmt.Errorf("rdma: fabric read: %w: %w", fabErr("fi_readmsg", rc), ErrDisconnected)
	}
	for i := n; i < k; i++ {
		o := c.mu.owners[i]
		c.mu.ctxFree = append(c.mu.ctxFree, o.ctx)
		switch o.kind {
		case useData:
			f := o.op
			f.posted--
			if f.next > int(o.seg) { // the first refused read of f: rewind
				f.next = int(o.seg)
				f.nextOff = f.landOff
				for j := range f.next {
					f.nextOff += len(f.segs[j].Dst)
				}
			}
			if perr != nil {
				f.next = len(f.segs)
				if f.err == nil {
					f.err = perr
				}
				f.check = true // no check: the reads failed
				c.settleLocked(f)
			} else {
				c.pendLocked(f)
			}
		case useFused:
			f := o.op
			f.posted--
			f.check = false
			f.next, f.nextOff = 0, f.landOff
			if perr != nil {
				f.next = len(f.segs)
				if f.err == nil {
					f.err = perr
				}
				f.check = true // no check: the read failed
				c.settleLocked(f)
			} else {
				c.pendLocked(f)
			}
		case useCheck:
			for _, f := range o.check.ops {
				f.posted--
				if perr != nil {
					c.finishLocked(f, perr)
				} else {
					c.addCheckLocked(f) // posted at the next flush
				}
			}
			c.freeCheckLocked(o.check)
		case useVerify:
			r := o.reg
			c.mu.smallFree = append(c.mu.smallFree, r.land)
			r.land = -1
			if perr != nil {
				c.verifiedLocked(r, slotImage{}, perr)
			} else if !r.queued {
				r.queued = true
				c.mu.verify = append(c.mu.verify, r)
			}
		}
	}
}

// settleLocked moves f on when none of its reads is in flight and none is
// left to post: after the data, the check read; after the check, done.
func (c *FabricClient) settleLocked(f *fabricOp) {
	if f.done != f.posted || f.next < len(f.segs) || f.checkQ {
		return
	}
	if !f.live() {
		c.freeOpLocked(f)
		return
	}
	if f.err != nil {
		// The data did not land; the slot tells whether it was revoked or
		// out of bounds (then the check read decides), else it failed.
		if f.check {
			c.finishLocked(f, f.err)
			return
		}
	}
	if !f.check {
		f.check = true
		if f.err == nil {
			if hook := c.opts.TestingKnobs.AfterCopy; hook != nil {
				hook(f.reg.rk.Key)
			}
		}
		c.addCheckLocked(f)
		return
	}
}

// wakeLocked wakes the reaper if it sleeps.
func (c *FabricClient) wakeLocked() {
	if c.mu.waiting {
		c.mu.waiting = false
		c.end.signal()
	}
	if c.mu.sleeping {
		c.mu.sleeping = false
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// reap takes completions and drives the client until Close.
func (c *FabricClient) reap() {
	defer close(c.done)
	var es [64]fabricCompletion
	spins, timeout := 0, 0
	var spinStart int64
	var sleep time.Duration
	lastSweep := monotime.Now()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		n, err := c.end.reap(es[:], timeout)
		if err != nil {
			c.opts.Logger.Warn("rdma: fabric completion queue", slog.Any("err", err))
		}
		timeout = 0
		now := monotime.Now()
		c.mu.Lock()
		c.mu.waiting = false
		if c.mu.closed {
			c.mu.Unlock()
			return
		}
		for i := range n {
			c.completeLocked(&es[i], now)
		}
		c.retryLocked(now)
		if now-lastSweep > int64(20*time.Millisecond) {
			c.sweepLocked()
			lastSweep = now
		}
		c.flushLocked()
		busy := c.mu.inflight > 0 || len(c.mu.pending) > 0 || len(c.mu.verify) > 0 || len(c.mu.room) > 0 || len(c.mu.later) > 0 || len(c.mu.checkRegs) > 0 || c.syncBusyLocked()
		switch {
		case n > 0:
		case !busy:
			c.mu.sleeping = true
		case spins > 0 && now-spinStart > int64(fabricSpin) && c.waits:
			// Wait in the completion queue (fi_cq_sread): a completion,
			// or a poster's fi_cq_signal, ends it.
			c.mu.waiting = true
			timeout = 1
		}
		c.mu.Unlock()
		if n > 0 {
			spins, sleep = 0, 0
			continue
		}
		if !busy {
			select {
			case <-c.wake:
			case <-c.stop:
				return
			}
			spins, sleep = 0, 0
			continue
		}
		if spins == 0 {
			spinStart = now
		}
		if spins++; now-spinStart <= int64(fabricSpin) || timeout > 0 {
			runtime.Gosched()
			continue
		}
		sleep = min(max(2*sleep, 20*time.Microsecond), time.Millisecond)
		timer.Reset(sleep)
		select {
		case <-c.wake:
		case <-c.stop:
			return
		case <-timer.C:
		}
	}
}

// fabricSpin is how long the reaper polls an empty completion queue
// before it waits (a software provider's round trip is tens of
// microseconds; a NIC's, a few).
const fabricSpin = 200 * time.Microsecond

// syncBusyLocked reports whether a clock exchange is wanted or waited for.
func (c *FabricClient) syncBusyLocked() bool {
	for _, p := range c.mu.peers {
		if p.want || p.nonce != 0 || len(p.waiting) > 0 {
			return true
		}
	}
	return false
}

// completeLocked handles one completion.
func (c *FabricClient) completeLocked(e *fabricCompletion, now int64) {
	i := c.ctxs.index(e.ctx)
	if i < 0 {
		return
	}
	if i < c.nRecv {
		if e.err == 0 {
			c.clockReplyLocked(unsafe.Slice((*byte)(c.msgBuf(i)), int(e.len)), now)
		}
		if !c.mu.closed {
			if rc := c.end.postRecv(c.msgBuf(i), fabricMsgBuffer, c.mr.desc, c.ctxs.ptr(i)); rc != 0 {
				c.opts.Logger.Warn("rdma: repost a receive", slog.Any("err", fabErr("fi_recv", rc)))
			}
		}
		return
	}
	u := c.mu.ctxUse[i]
	c.mu.ctxUse[i] = ctxUse{}
	if u.kind != useSend {
		c.mu.ctxFree = append(c.mu.ctxFree, int32(i))
	}
	c.mu.inflight--
	switch u.kind {
	case useData:
		f := u.op
		f.done++
		if e.err != 0 && f.err == nil {
			f.err = fmt.Errorf("rdma: fabric read of region %d: %w: %w", f.reg.rk.Region, completionErr(e, "read"), ErrDisconnected)
		}
		c.settleLocked(f)
	case useFused:
		f := u.op
		f.done++
		if e.err != 0 {
			// Tell a revocation or a bound from a lost server with a
			// check read of its own.
			if f.err == nil {
				f.err = fmt.Errorf("rdma: fabric read of region %d: %w: %w", f.reg.rk.Region, completionErr(e, "read"), ErrDisconnected)
			}
			f.check = false
			c.settleLocked(f)
			break
		}
		f.checkAt = now
		c.checkedLocked(f, decodeSlot(c.arena[f.landOff+f.total:]), nil)
	case useCheck:
		chk := u.check
		f0 := chk.ops[0]
		img := decodeSlot(c.arena[f0.landOff+f0.total:])
		var err error
		if e.err != 0 {
			err = fmt.Errorf("rdma: fabric check of region %d: %w: %w", chk.reg.rk.Region, completionErr(e, "read"), ErrDisconnected)
		}
		for _, f := range chk.ops {
			f.done++
			f.checkAt = now
			c.checkedLocked(f, img, err)
		}
		c.freeCheckLocked(chk)
	case useVerify:
		r := u.reg
		img := decodeSlot(c.arena[int(r.land)*landingSmall:])
		c.mu.smallFree = append(c.mu.smallFree, r.land)
		r.land = -1
		var err error
		if e.err != 0 {
			err = fmt.Errorf("rdma: fabric read of the registration of region %d at %s: %w: %w", r.rk.Region, r.rk.Addr, completionErr(e, "read"), ErrDisconnected)
		}
		c.verifiedLocked(r, img, err)
		c.roomLocked()
	case useSend:
		c.mu.ctxUse[i] = ctxUse{}
		c.mu.sendFree = append(c.mu.sendFree, i)
		u.peer.sendBusy = false
		if e.err != 0 {
			c.syncFailedLocked(u.peer, fmt.Errorf("rdma: fabric clock request to %x: %w: %w", u.peer.id.addr, completionErr(e, "send"), ErrDisconnected))
		}
	}
}

// verifiedLocked ends r's verification: its slot image, or the read's
// error.
func (c *FabricClient) verifiedLocked(r *fabricRegState, img slotImage, err error) {
	waiting := r.waiting
	r.waiting = nil
	if err == nil {
		if st := img.judge(r.rk.Key, nil); st != statusOK {
			err = fmt.Errorf("rdma: fabric read of region %d: key %v: %w", r.rk.Region, r.rk.Key, st.err())
			r.state, r.err = regFailed, err
		} else {
			r.state, r.length = regVerified, img.length
		}
	} else {
		r.state = regNew // verify again on next use
	}
	for _, f := range waiting {
		switch {
		case !f.live():
			c.freeOpLocked(f)
		case err != nil:
			c.finishLocked(f, err)
		default:
			if berr := boundsErr(f.segs, r.length); berr != nil {
				c.finishLocked(f, berr)
			} else {
				c.startLocked(f)
			}
		}
	}
}

// checkedLocked judges f by its check read: the slot image copied after
// its data landed.
func (c *FabricClient) checkedLocked(f *fabricOp, img slotImage, err error) {
	if !f.live() {
		c.freeOpLocked(f)
		return
	}
	if err != nil {
		if f.err != nil && f.checkTries < fabricCheckTries {
			// A provider may drop the connection that failed a read
			// (tcp;ofi_rxm does on a revoked key): check again over a
			// new one, to tell a revocation from a lost server.
			f.checkTries++
			f.checkQ = true
			f.retryAt = monotime.Now() + int64(fabricCheckRetry)<<(2*f.checkTries)
			c.mu.later = append(c.mu.later, f)
			return
		}
		if f.err != nil {
			err = fmt.Errorf("%w (and its check: %v)", f.err, err)
		}
		c.finishLocked(f, err)
		return
	}
	r := f.reg
	switch st := img.judge(r.rk.Key, f.segs); st {
	case statusOK:
	case statusRevoked, statusBadKey:
		r.state = regFailed
		r.err = fmt.Errorf("rdma: fabric read of region %d: key %v: %w", r.rk.Region, r.rk.Key, st.err())
		c.finishLocked(f, r.err)
		return
	default:
		c.finishLocked(f, fmt.Errorf("rdma: fabric read of region %d: %w", r.rk.Region, st.err()))
		return
	}
	if f.err != nil {
		c.finishLocked(f, f.err)
		return
	}
	p := r.peer
	if img.lease != 0 {
		if !p.sync.valid() {
			f.lease = img.lease
			p.waiting = append(p.waiting, f)
			p.want = true
			return
		}
		if !leaseHolds(img.lease, p.sync, f.checkAt, c.opts.ClockDrift) {
			c.finishLocked(f, fmt.Errorf("rdma: fabric read of region %d: the server's read lease had lapsed: %w", r.rk.Region, ErrRevoked))
			return
		}
		if f.checkAt-p.sync.sent > int64(c.opts.SyncInterval) {
			p.want = true
		}
	}
	c.finishLocked(f, nil)
}

// fabricSyncTries is how many clock requests go unanswered before the
// reads waiting for a clock fail.
const fabricSyncTries = 8

// fabricCheckTries is how many times a check read that failed after its
// data failed is posted again.
const fabricCheckTries = 4

// fabricCheckRetry is the first wait before a check is posted again; each
// retry waits four times longer (40ms, 160ms, 640ms, 2.56s).
const fabricCheckRetry = 10 * time.Millisecond

// retryLocked posts again what waits: refused reads, verifications, clock
// requests.
func (c *FabricClient) retryLocked(now int64) {
	if len(c.mu.later) > 0 {
		keep := c.mu.later[:0]
		for _, f := range c.mu.later {
			if now >= f.retryAt || !f.live() {
				c.pendLocked(f)
			} else {
				keep = append(keep, f)
			}
		}
		clear(c.mu.later[len(keep):])
		c.mu.later = keep
	}
	if len(c.mu.pending) > 0 {
		pending := c.mu.pending
		c.mu.pending = c.mu.spare[:0]
		defer func() { clear(pending); c.mu.spare = pending[:0] }()
		for _, f := range pending {
			f.queued = false
			if !f.live() {
				f.next, f.checkQ = len(f.segs), false
				if f.done == f.posted {
					c.freeOpLocked(f)
				}
				continue
			}
			if f.checkQ {
				c.addCheckLocked(f)
			} else {
				c.addDataLocked(f)
			}
		}
	}
	if len(c.mu.verify) > 0 {
		verify := c.mu.verify
		c.mu.verify = nil
		for i, r := range verify {
			r.queued = false
			if !c.addVerifyLocked(r) {
				for _, r := range verify[i:] {
					r.queued = true
					c.mu.verify = append(c.mu.verify, r)
				}
				break
			}
		}
	}
	for _, p := range c.mu.peers {
		switch {
		case p.nonce != 0 && now-p.sentAt > int64(fabricSyncRetry):
			delete(c.mu.nonces, p.nonce)
			p.nonce = 0
			if p.tries >= fabricSyncTries {
				c.syncFailedLocked(p, fmt.Errorf("rdma: fabric server %x answered none of %d clock requests: %w", p.id.addr, p.tries, ErrDisconnected))
				continue
			}
			p.want = true
		case !p.want || p.nonce != 0 || p.sendBusy:
			continue
		}
		c.sendClockLocked(p, now)
	}
}

// sendClockLocked sends p a clock request.
func (c *FabricClient) sendClockLocked(p *fabricPeer, now int64) {
	n := len(c.mu.sendFree)
	if n == 0 {
		return
	}
	i := c.mu.sendFree[n-1]
	var nb [8]byte
	_, _ = crand.Read(nb[:])
	nonce := binary.LittleEndian.Uint64(nb[:]) | 1
	buf := unsafe.Slice((*byte)(c.msgBuf(i)), fabricMsgBuffer)
	m := encodeClockRequest(buf, nonce, c.addr)
	rc := c.end.send(c.msgBuf(i), m, c.mr.desc, p.fa, c.ctxs.ptr(i))
	switch {
	case rc == errAgain:
		return // again on the next turn
	case rc != 0:
		c.syncFailedLocked(p, fmt.Errorf("rdma: fabric clock request to %x: %w: %w", p.id.addr, fabErr("fi_send", rc), ErrDisconnected))
		return
	}
	c.mu.sendFree = c.mu.sendFree[:n-1]
	c.mu.ctxUse[i] = ctxUse{kind: useSend, peer: p, buf: i}
	c.mu.inflight++
	p.sendBusy, p.want = true, false
	p.nonce, p.sentAt = nonce, now
	p.tries++
	c.mu.nonces[nonce] = p
}

// clockReplyLocked takes a clock reply received at now.
func (c *FabricClient) clockReplyLocked(b []byte, now int64) {
	nonce, server, inc, ok := decodeClockReply(b)
	if !ok {
		return
	}
	p := c.mu.nonces[nonce]
	if p == nil || p.nonce != nonce || p.id.incarnation != inc {
		return
	}
	delete(c.mu.nonces, nonce)
	p.nonce, p.tries = 0, 0
	p.sync = clockSync{sent: p.sentAt, server: server}
	waiting := p.waiting
	p.waiting = nil
	for _, f := range waiting {
		switch {
		case !f.live():
			c.freeOpLocked(f)
		case leaseHolds(f.lease, p.sync, f.checkAt, c.opts.ClockDrift):
			c.finishLocked(f, nil)
		default:
			c.finishLocked(f, fmt.Errorf("rdma: fabric read of region %d: the server's read lease had lapsed: %w", f.reg.rk.Region, ErrRevoked))
		}
	}
}

// syncFailedLocked fails the reads waiting for p's clock.
func (c *FabricClient) syncFailedLocked(p *fabricPeer, err error) {
	if p.nonce != 0 {
		delete(c.mu.nonces, p.nonce)
		p.nonce = 0
	}
	p.tries, p.want = 0, false
	waiting := p.waiting
	p.waiting = nil
	for _, f := range waiting {
		c.finishLocked(f, err)
	}
}

// sweepLocked frees the cancelled ops that wait with nothing in flight
// (for a verification, landing room or a clock).
func (c *FabricClient) sweepLocked() {
	keep := func(list []*fabricOp) []*fabricOp {
		out := list[:0]
		for _, f := range list {
			if f.live() {
				out = append(out, f)
			} else {
				c.freeOpLocked(f)
			}
		}
		clear(list[len(out):])
		return out
	}
	for _, r := range c.mu.regs {
		if len(r.waiting) > 0 {
			r.waiting = keep(r.waiting)
		}
	}
	for _, p := range c.mu.peers {
		if len(p.waiting) > 0 {
			p.waiting = keep(p.waiting)
		}
	}
	c.mu.room = keep(c.mu.room)
	now := monotime.Now()
	var stuck []*fabricPeer
	for _, f := range c.mu.all {
		if now-f.startAt > int64(c.opts.ReadTimeout) && !f.reg.peer.dead {
			stuck = append(stuck, f.reg.peer)
		}
	}
	for _, p := range stuck {
		c.killPeerLocked(p, fmt.Errorf("rdma: fabric server %s did not answer a read for %v: %w", p.name(), c.opts.ReadTimeout, ErrDisconnected))
	}
}

// killPeerLocked gives up on p: every read of it fails with err now (the
// landing room of those in flight is freed when the provider returns
// them, or at Close), its registrations and clock are forgotten, and its
// address is removed from the address vector. A later read naming it
// starts afresh.
func (c *FabricClient) killPeerLocked(p *fabricPeer, err error) {
	if p.dead {
		return
	}
	// Reads already batched for p go out before its address does.
	c.flushLocked()
	p.dead = true
	if len(c.mu.gone) >= maxFabricRegs {
		clear(c.mu.gone)
	}
	// Reads naming it fail at once for a while (a server of this process
	// that closed: for good).
	c.mu.gone[p.id] = monotime.Now() + int64(c.opts.ReadTimeout)
	c.opts.Logger.Warn("rdma: fabric server given up", slog.String("server", p.name()), slog.Any("err", err))
	delete(c.mu.peers, p.id)
	for k, r := range c.mu.regs {
		if r.peer != p {
			continue
		}
		delete(c.mu.regs, k)
		waiting := r.waiting
		r.waiting = nil
		for _, f := range waiting {
			c.finishLocked(f, err)
		}
	}
	c.syncFailedLocked(p, err)
	for _, f := range c.mu.all {
		if f.reg.peer == p && f.op.claimGen(f.gen) {
			f.op.complete(err)
		}
	}
	if err := c.end.avRemove(p.fa); err != nil {
		c.opts.Logger.Debug("rdma: remove a fabric server's address", slog.Any("err", err))
	}
}

func (p *fabricPeer) name() string { return fmt.Sprintf("%x", p.id.addr) }

// fabricClients are the live fabric clients of this process. A
// FabricServer closing tells them first: libfabric's shm provider lets a
// client in the server's own process use the server's memory directly,
// which the server's close frees.
var fabricClients = struct {
	sync.Mutex
	m map[*FabricClient]struct{}
}{m: make(map[*FabricClient]struct{})}

// forgetFabricServer makes every fabric client of this process give up
// the server at addr (a raw endpoint address).
func forgetFabricServer(addr string) {
	fabricClients.Lock()
	defer fabricClients.Unlock()
	for c := range fabricClients.m {
		c.mu.Lock()
		if !c.mu.closed {
			for _, p := range c.mu.peers {
				if p.id.addr == addr {
					c.killPeerLocked(p, fmt.Errorf("rdma: fabric server %s closed: %w", p.name(), ErrDisconnected))
					c.mu.gone[p.id] = math.MaxInt64
				}
			}
		}
		c.mu.Unlock()
	}
}

// Close implements Client: reads in flight fail with ErrClosed; the
// endpoint is closed once the reaper has stopped.
func (c *FabricClient) Close() error {
	if !c.closing.CompareAndSwap(false, true) {
		return nil
	}
	fabricClients.Lock()
	delete(fabricClients.m, c)
	fabricClients.Unlock()
	c.mu.Lock()
	c.mu.closed = true
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	c.polling.Lock() // no reader polls the queue any more
	defer c.polling.Unlock()
	c.mu.Lock()
	for _, f := range c.mu.all {
		if f.op.claimGen(f.gen) {
			f.op.complete(ErrClosed)
		}
	}
	c.mu.all = nil
	c.release()
	c.mu.Unlock()
	return nil
}
