//go:build libfabric && cgo

package rdma

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/internal/monotime"
)

// FabricServer is the server side of the fabric provider: it registers
// regions with a libfabric domain (fi_mr_reg) for remote reads, and
// publishes each registration's key, lease and length in a registration
// table that clients read after every read (doc.go). One goroutine drives
// the provider's progress as the profile says and answers clients' clock
// requests.
type FabricServer struct {
	opts        FabricOptions
	host        string
	incarnation uint64
	end         *fabricEnd
	prov        string // the libfabric provider in use

	table   []byte // registration table (a mapping), registered remote-readable
	tableMR fabricMR
	msgs    []byte // message buffers: recvs, then sends
	msgMR   fabricMR
	ctxs    *fabricContexts
	nRecv   int

	stop chan struct{}
	done chan struct{}

	mu struct {
		sync.Mutex
		closed bool
		live   map[Key]*fabricReg
		free   []uint32 // revoked slots, oldest revocation first
		fresh  uint32
	}
}

var _ Server = (*FabricServer)(nil)

// fabricReg is one registration.
type fabricReg struct {
	slot uint32
	mr   fabricMR
	pin  runtime.Pinner
}

// Message buffers of a server: recvs wait for clock requests, sends carry
// the replies.
const (
	fabricServerRecvs = 32
	fabricServerSends = 32
	maxFabricClients  = 4096 // clients' addresses kept in the address vector
)

// NewFabricServer opens an RDM endpoint of opts.Provider, registers its
// registration table and starts its progress goroutine.
func NewFabricServer(opts FabricOptions) (*FabricServer, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	host := opts.Host
	if host == "" {
		host, _ = HostID() // for operators only
	}
	prof := fabricProfileOf(opts.Provider)
	removeStaleFabricSHM(prof.libfabric, opts.Logger)
	end, err := openFabric(prof.libfabric, opts.Node, opts.Service, opts.Progress == ProgressAuto)
	if err != nil {
		return nil, fmt.Errorf("rdma: fabric provider %q: %w: %w", prof.libfabric, err, ErrUnsupported)
	}
	s := &FabricServer{opts: opts, host: host, end: end, prov: end.provider(), stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.live = make(map[Key]*fabricReg)
	for s.incarnation == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		s.incarnation = binary.LittleEndian.Uint64(b[:])
	}
	if err := s.setup(); err != nil {
		s.release()
		return nil, err
	}
	opts.Logger.Info("rdma: fabric endpoint open", slog.String("provider", s.prov), slog.String("addr", end.straddr()),
		slog.String("progress", opts.Progress), slog.Bool("provider_thread", end.autoProgress()),
		slog.String("mr_mode", end.mrModeString()), slog.Bool("cq_wait", end.hasWait()), slog.Int("slots", opts.Slots))
	go s.progress()
	return s, nil
}

// removeStaleFabricSHM removes the shm provider's files of dead processes
// before an shm endpoint opens.
func removeStaleFabricSHM(prov string, log *slog.Logger) {
	if prov != "shm" {
		return
	}
	if stale, err := RemoveStaleFabricSHM(""); err != nil {
		log.Warn("rdma: removing libfabric shm files of dead processes", slog.Any("err", err))
	} else if len(stale) > 0 {
		log.Info("rdma: removed libfabric shm files of dead processes", slog.Any("paths", stale))
	}
}

// setup maps and registers the table and the message buffers and posts
// the receives.
func (s *FabricServer) setup() error {
	var err error
	if s.table, err = anonMap(fabricTableSize(s.opts.Slots)); err != nil {
		return err
	}
	le.PutUint32(s.table[8:], fabricTableVersion)
	le.PutUint32(s.table[12:], uint32(s.opts.Slots))
	atomicmem.StoreUint64(s.table, 0, fabricTableMagic)
	if s.tableMR, err = s.registerMem(unsafe.Pointer(&s.table[0]), len(s.table), accessRemoteRead); err != nil {
		return fmt.Errorf("rdma: register the fabric registration table: %w", err)
	}
	s.nRecv = fabricServerRecvs
	if s.msgs, err = anonMap((fabricServerRecvs + fabricServerSends) * fabricMsgBuffer); err != nil {
		return err
	}
	if s.msgMR, err = s.end.register(unsafe.Pointer(&s.msgs[0]), len(s.msgs), accessLocal, 0); err != nil {
		return fmt.Errorf("rdma: register the fabric message buffers: %w", err)
	}
	s.ctxs = newFabricContexts(fabricServerRecvs + fabricServerSends)
	for i := range fabricServerRecvs {
		if rc := s.end.postRecv(s.msgBuf(i), fabricMsgBuffer, s.msgMR.desc, s.ctxs.ptr(i)); rc != 0 {
			return fmt.Errorf("rdma: post a receive: %w", fabErr("fi_recv", rc))
		}
	}
	return nil
}

func (s *FabricServer) msgBuf(i int) unsafe.Pointer {
	return unsafe.Pointer(&s.msgs[i*fabricMsgBuffer])
}

// registerMem registers memory for remote reads with a fresh random key
// (the provider's under FI_MR_PROV_KEY).
func (s *FabricServer) registerMem(p unsafe.Pointer, n int, access uint64) (fabricMR, error) {
	for try := 0; ; try++ {
		var key uint64
		if !s.end.provKey() {
			key = uint64(newKey(func(Key) bool { return false }))
			if ks := s.end.keySize(); ks > 0 && ks < 8 {
				key &= 1<<(8*ks) - 1
			}
		}
		mr, err := s.end.register(p, n, access, key)
		if err == nil || !isKeyTaken(err) || try == 8 {
			return mr, err
		}
	}
}

// Provider returns "fabric".
func (s *FabricServer) Provider() string { return ProviderFabric }

// Caps returns the provider's capabilities.
func (s *FabricServer) Caps() Caps { return fabricCaps(s.opts.Provider, s.opts.Limits) }

// LibfabricProvider returns the libfabric provider in use ("tcp;ofi_rxm").
func (s *FabricServer) LibfabricProvider() string { return s.prov }

// Addr returns the endpoint's address in libfabric's text form
// ("fi_sockaddr_in://10.0.0.1:41234", "fi_shm://1234").
func (s *FabricServer) Addr() string { return s.end.straddr() }

// Progress returns the progress strategy in force.
func (s *FabricServer) Progress() string { return s.opts.Progress }

// Register registers region's memory with the domain and publishes a fresh
// key for it in a table slot.
func (s *FabricServer) Register(region Region) (RemoteKey, error) {
	mem := region.Bytes()
	if !atomicmem.Aligned(mem) || len(mem)%atomicmem.Word != 0 || len(mem) == 0 {
		return RemoteKey{}, fmt.Errorf("rdma: region %d memory not 8-byte aligned: %w", region.ID(), ErrMisaligned)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return RemoteKey{}, ErrClosed
	}
	var slot uint32
	switch {
	case int(s.mu.fresh) < s.opts.Slots:
		slot = s.mu.fresh
		s.mu.fresh++
	case len(s.mu.free) > 0:
		slot = s.mu.free[0]
		s.mu.free = s.mu.free[1:]
	default:
		return RemoteKey{}, fmt.Errorf("rdma: %d registrations: %w", s.opts.Slots, ErrTooManyRegistrations)
	}
	reg := &fabricReg{slot: slot}
	pinRegion(&reg.pin, mem)
	mr, err := s.registerMem(unsafe.Pointer(&mem[0]), len(mem), accessRemoteRead)
	if err != nil {
		reg.pin.Unpin()
		s.mu.free = append(s.mu.free, slot)
		return RemoteKey{}, fmt.Errorf("rdma: register region %d (%s) with %s: %w", region.ID(), byteSize(len(mem)), s.prov, err)
	}
	reg.mr = mr
	off := int(fabricSlotOffset(slot))
	prev := Key(atomicmem.LoadUint64(s.table, off+offSlotKey) &^ keyTombstone)
	k := newKey(func(k Key) bool { _, ok := s.mu.live[k]; return ok || k == prev })
	s.mu.live[k] = reg
	atomicmem.StoreUint64(s.table, off+offSlotLease, 0)
	atomicmem.StoreUint64(s.table, off+offSlotLen, uint64(len(mem)))
	atomicmem.StoreUint64(s.table, off+offSlotKey, uint64(k))
	d := fabricDesc{provider: s.prov, addr: s.end.address(), key: mr.key, tableKey: s.tableMR.key, incarnation: s.incarnation}
	if s.end.virtAddr() {
		d.base = uint64(uintptr(unsafe.Pointer(&mem[0])))
		d.tbase = uint64(uintptr(unsafe.Pointer(&s.table[0])))
	}
	return RemoteKey{
		Provider: ProviderFabric, Key: k, Region: region.ID(), Len: uint64(len(mem)),
		Addr: s.end.straddr(), Host: s.host, Slot: slot, Desc: d.encode(),
	}, nil
}

// SetLease sets k's read lease in its slot; clients judge it after every
// read (doc.go).
func (s *FabricServer) SetLease(k Key, until int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	reg, ok := s.mu.live[k]
	if !ok {
		return fmt.Errorf("rdma: lease of %v: %w", k, ErrBadKey)
	}
	atomicmem.StoreUint64(s.table, int(fabricSlotOffset(reg.slot))+offSlotLease, uint64(until))
	return nil
}

// Deregister stores k's tombstone in its slot, then closes the memory
// registration: from the store on no read of k is accepted (clients check
// the slot after each read), and once the registration is closed the
// provider no longer reads the region for anyone (doc.go says what
// software providers may still have in flight).
func (s *FabricServer) Deregister(k Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	reg, ok := s.mu.live[k]
	if !ok {
		return fmt.Errorf("rdma: deregister %v: %w", k, ErrBadKey)
	}
	s.revokeLocked(k, reg)
	s.mu.free = append(s.mu.free, reg.slot)
	return nil
}

func (s *FabricServer) revokeLocked(k Key, reg *fabricReg) {
	atomicmem.StoreUint64(s.table, int(fabricSlotOffset(reg.slot))+offSlotKey, uint64(k)|keyTombstone)
	if err := reg.mr.close(); err != nil {
		s.opts.Logger.Warn("rdma: close a fabric registration", slog.Any("err", err))
	}
	reg.pin.Unpin()
	delete(s.mu.live, k)
}

// Close revokes every registration, stops the progress goroutine and
// closes the endpoint, domain and fabric. Reads in flight fail
// (ErrDisconnected or ErrRevoked at the client).
func (s *FabricServer) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	for k, reg := range s.mu.live {
		s.revokeLocked(k, reg)
	}
	s.mu.Unlock()
	close(s.stop)
	s.end.signal()
	<-s.done
	forgetFabricServer(s.end.address())
	s.release()
	return nil
}

// release closes what setup and NewFabricServer opened.
func (s *FabricServer) release() {
	_ = s.tableMR.close()
	_ = s.msgMR.close()
	s.end.close()
	if s.ctxs != nil {
		s.ctxs.free()
	}
	_ = unmap(s.table)
	_ = unmap(s.msgs)
	s.table, s.msgs = nil, nil
}

// progress drives the provider and answers clock requests until Close.
// With ProgressTick it takes the completion queue every interval (which
// is what makes shm's reads progress); otherwise it waits on the queue
// (or polls it every interval when it has no wait object): the provider's
// thread or the NIC serves the reads.
func (s *FabricServer) progress() {
	defer close(s.done)
	var (
		es      [16]fabricCompletion
		clients = make(map[string]uint64)
		busy    = make(map[uint64]int) // sends in flight per client
		sends   = make([]int, 0, fabricServerSends)
	)
	for i := range fabricServerSends {
		sends = append(sends, s.nRecv+i)
	}
	wait := s.opts.Progress != ProgressTick && s.end.hasWait()
	tick := time.NewTicker(s.opts.ProgressInterval)
	defer tick.Stop()
	sendTo := make(map[int]uint64) // send buffer -> client
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		timeout := 0
		if wait {
			timeout = 100
		}
		n, err := s.end.reap(es[:], timeout)
		if err != nil {
			s.opts.Logger.Warn("rdma: fabric completion queue", slog.Any("err", err))
		}
		for i := range n {
			e := &es[i]
			idx := s.ctxs.index(e.ctx)
			switch {
			case idx < 0:
			case idx < s.nRecv:
				if e.err == 0 {
					b := unsafe.Slice((*byte)(s.msgBuf(idx)), int(e.len))
					s.answer(b, clients, busy, &sends, sendTo)
				}
				if rc := s.end.postRecv(s.msgBuf(idx), fabricMsgBuffer, s.msgMR.desc, s.ctxs.ptr(idx)); rc != 0 {
					s.opts.Logger.Warn("rdma: repost a receive", slog.Any("err", fabErr("fi_recv", rc)))
				}
			default:
				if a, ok := sendTo[idx]; ok {
					busy[a]--
					delete(sendTo, idx)
				}
				sends = append(sends, idx)
			}
		}
		if n > 0 {
			continue
		}
		if !wait {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}
}

// answer answers a clock request in b.
func (s *FabricServer) answer(b []byte, clients map[string]uint64, busy map[uint64]int, sends *[]int, sendTo map[int]uint64) {
	nonce, addr, ok := decodeClockRequest(b)
	if !ok || len(*sends) == 0 {
		return // not ours, or no buffer: the client asks again
	}
	fa, ok := clients[addr]
	if !ok {
		if len(clients) >= maxFabricClients {
			for a, x := range clients {
				if busy[x] == 0 {
					_ = s.end.avRemove(x)
					delete(clients, a)
					delete(busy, x)
					break
				}
			}
		}
		var err error
		if fa, err = s.end.avInsert(addr); err != nil {
			s.opts.Logger.Debug("rdma: a fabric client's address", slog.Any("err", err))
			return
		}
		clients[addr] = fa
	}
	i := (*sends)[len(*sends)-1]
	buf := unsafe.Slice((*byte)(s.msgBuf(i)), fabricMsgBuffer)
	n := encodeClockReply(buf, nonce, monotime.Now()+int64(s.opts.TestingKnobs.ClockOffset), s.incarnation)
	if rc := s.end.send(s.msgBuf(i), n, s.msgMR.desc, fa, s.ctxs.ptr(i)); rc != 0 {
		return // full: the client asks again
	}
	*sends = (*sends)[:len(*sends)-1]
	busy[fa]++
	sendTo[i] = fa
}
