package rdma

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
)

// The fabric provider reads over libfabric (doc.go, "The fabric
// provider"). Its two sides, FabricServer and FabricClient, are built
// only with the build tag libfabric (cgo, libfabric-dev installed); this
// file holds what the rest of Cell needs in every build: the options,
// the provider profiles, and the formats the two sides share (the remote
// key descriptor, the registration table, the clock messages), which are
// pure Go.

// ProviderFabric is the libfabric provider's name. It is listed by
// Providers only in builds with the libfabric tag.
const ProviderFabric = "fabric"

// Progress strategies: how a fabric server makes its side of reads
// progress (FabricOptions.Progress).
const (
	// ProgressTick calls the completion queue every ProgressInterval from
	// a goroutine: providers whose target side must be driven (shm: a
	// read's command waits in the target's queue until the target takes
	// it off).
	ProgressTick = "tick"
	// ProgressAuto asks the provider for its own progress thread
	// (FI_PROGRESS_AUTO): tcp;ofi_rxm serves reads from it. A goroutine
	// still takes the clock messages, blocking on the completion queue.
	ProgressAuto = "auto"
	// ProgressConn leaves reads to the NIC: the server's goroutine only
	// handles connections and clock messages (verbs, efa, cxi).
	ProgressConn = "conn"
)

// fabricProfile is what Cell knows of a libfabric provider.
type fabricProfile struct {
	// libfabric is the provider name given to fi_getinfo.
	libfabric string
	// progress is the default progress strategy.
	progress string
	// interval is the default tick of ProgressTick (and the poll of the
	// other strategies when the completion queue has no wait object).
	interval time.Duration
	// sparesCPU: a read costs the target's CPU nothing (hardware).
	sparesCPU bool
	// ordered: reads copy in increasing address order in 8-byte words
	// (Caps.OrderedReads).
	ordered bool
	// waits: a client may wait in the completion queue (fi_cq_sread):
	// its wait object wakes on a completion. Not shm's, whose reads
	// progress only while the reader polls.
	waits bool
	// fused: one read of several remote ranges copies them in their
	// order, so that a read can carry its check: the slot as a last
	// range, copied after the data (tcp;ofi_rxm: one reply, sent from
	// the ranges in order). Not shm's (a read of several ranges is the
	// target's work, and one of a revoked key is never answered), nor a
	// NIC's (verbs;ofi_rxm splits it into reads that may run in any
	// order).
	fused bool
}

// fabricProfiles are the providers Cell names (--fabric-provider). Any
// other name is passed to libfabric as is, with the profile of
// unknownFabricProfile.
var fabricProfiles = map[string]fabricProfile{
	// shm: a read is a process_vm_readv by the reader (CMA) plus a
	// command in the target's queue that the target's progress retires:
	// the kernel copies in address order.
	"shm": {libfabric: "shm", progress: ProgressTick, interval: time.Millisecond, ordered: true},
	// tcp;ofi_rxm: the target's progress thread sends the bytes from the
	// registered memory (the kernel copies them, in address order).
	"tcp": {libfabric: "tcp;ofi_rxm", progress: ProgressAuto, interval: 10 * time.Millisecond, ordered: true, waits: true, fused: true},
	// verbs;ofi_rxm: InfiniBand and RoCE NICs read host memory in address
	// order (the paper's footnote 3).
	"verbs": {libfabric: "verbs;ofi_rxm", progress: ProgressConn, interval: 10 * time.Millisecond, sparesCPU: true, ordered: true, waits: true},
	// efa and cxi: the NIC serves reads; their copy order is not
	// documented, so Cell does not claim ordered reads for them.
	"efa": {libfabric: "efa", progress: ProgressConn, interval: 10 * time.Millisecond, sparesCPU: true},
	"cxi": {libfabric: "cxi", progress: ProgressConn, interval: 10 * time.Millisecond, sparesCPU: true},
}

// unknownFabricProfile is the profile of a provider Cell does not name:
// driven by a tick (always correct), no claims.
var unknownFabricProfile = fabricProfile{progress: ProgressTick, interval: time.Millisecond}

// FabricProviderNames returns the provider names Cell knows, sorted.
func FabricProviderNames() []string { return []string{"cxi", "efa", "shm", "tcp", "verbs"} }

// fabricProfileOf returns the profile of a --fabric-provider name, which
// may also be a libfabric provider name ("tcp;ofi_rxm").
func fabricProfileOf(name string) fabricProfile {
	if p, ok := fabricProfiles[name]; ok {
		return p
	}
	for _, p := range fabricProfiles {
		if p.libfabric == name {
			return p
		}
	}
	p := unknownFabricProfile
	p.libfabric = name
	return p
}

// LibfabricName returns the libfabric provider name fi_getinfo is asked
// for: "tcp" is "tcp;ofi_rxm", "verbs" is "verbs;ofi_rxm", others as is.
func LibfabricName(provider string) string { return fabricProfileOf(provider).libfabric }

// fabricCaps returns the capabilities of a fabric provider.
func fabricCaps(provider string, l Limits) Caps {
	p := fabricProfileOf(provider)
	return Caps{OrderedReads: p.ordered, VectorReads: true, SparesServerCPU: p.sparesCPU,
		MaxReadLen: l.MaxReadLen, MaxSegments: l.MaxSegments}
}

// FabricOptions configure a fabric server. The zero value of every field
// but Provider means its default.
type FabricOptions struct {
	// Provider is the libfabric provider: shm, tcp (tcp;ofi_rxm), verbs
	// (verbs;ofi_rxm), efa, cxi, or any libfabric provider name. Required.
	Provider string
	// Node is the address or interface the endpoint binds to (tcp,
	// verbs: an IP address of the NIC). Default: the provider's choice
	// (its first interface).
	Node string
	// Service is the port (tcp). Default: any free one.
	Service string
	// Progress is the progress strategy (ProgressTick, ProgressAuto,
	// ProgressConn). Default: the provider's (tick for shm, auto for tcp,
	// conn for verbs, efa and cxi, tick for others).
	Progress string
	// ProgressInterval is the tick of ProgressTick, and the poll of the
	// completion queue by the other strategies when it has no wait
	// object. Default 1ms for shm, 10ms for the others.
	ProgressInterval time.Duration
	// Slots is the number of registrations the table holds at once.
	// Default 1024.
	Slots int
	// Host is this host's identity, copied into every RemoteKey (for
	// operators; the fabric provider reads across hosts). Default HostID().
	Host string
	// Limits are advertised in Caps; clients enforce their own.
	Limits
	// Logger receives the endpoint's creation and failures. Default
	// slog.Default().
	Logger *slog.Logger
	// TestingKnobs are test hooks; zero in production.
	TestingKnobs FabricServerKnobs
}

// FabricServerKnobs are test hooks of a fabric server.
type FabricServerKnobs struct {
	// ClockOffset is added to the clock readings the server sends
	// clients, as if its host's clock were that far ahead: leases are
	// then set in that clock too.
	ClockOffset time.Duration
}

// EnsureDefaults fills zero fields with their defaults.
func (o *FabricOptions) EnsureDefaults() {
	o.Limits.EnsureDefaults()
	p := fabricProfileOf(o.Provider)
	if o.Progress == "" {
		o.Progress = p.progress
	}
	if o.ProgressInterval == 0 {
		o.ProgressInterval = p.interval
	}
	if o.Slots == 0 {
		o.Slots = DefaultFabricSlots
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// DefaultFabricSlots is the default size of a fabric server's
// registration table.
const DefaultFabricSlots = 1024

// Validate reports whether the options are usable. Errors wrap
// ErrInvalidOptions.
func (o *FabricOptions) Validate() error {
	if err := o.Limits.Validate(); err != nil {
		return err
	}
	if err := validFabricProvider(o.Provider); err != nil {
		return err
	}
	switch o.Progress {
	case ProgressTick, ProgressAuto, ProgressConn:
	default:
		return fmt.Errorf("rdma: fabric progress %q is not tick, auto or conn: %w", o.Progress, ErrInvalidOptions)
	}
	if o.ProgressInterval < 10*time.Microsecond || o.ProgressInterval > time.Second {
		return fmt.Errorf("rdma: fabric progress interval %v not in [10µs, 1s]: %w", o.ProgressInterval, ErrInvalidOptions)
	}
	if o.Slots < 1 || o.Slots > 1<<20 {
		return fmt.Errorf("rdma: %d registration slots not in [1, %d]: %w", o.Slots, 1<<20, ErrInvalidOptions)
	}
	return nil
}

func validFabricProvider(p string) error {
	if p == "" {
		return fmt.Errorf("rdma: no fabric provider (want one of %s or a libfabric provider name): %w", strings.Join(FabricProviderNames(), ", "), ErrInvalidOptions)
	}
	if strings.ContainsAny(p, "|\x00 ") || len(p) > 64 {
		return fmt.Errorf("rdma: fabric provider %q: %w", p, ErrInvalidOptions)
	}
	return nil
}

// FabricClientOptions configure a fabric client. The zero value of every
// field but Provider means its default.
type FabricClientOptions struct {
	// Provider is the libfabric provider, as in FabricOptions: the
	// client reads only the keys of servers with the same one. Required.
	Provider string
	// Node is the address the client's endpoint binds to (tcp: an IP
	// address servers can reach). Default: the provider's choice.
	Node string
	// Limits are checked on every read. Defaults: see Limits.
	Limits
	// LandingBytes is the size of the registered area reads land in
	// before they are copied to their destinations: 8 KiB slots for
	// reads of up to 8 KiB, MaxReadLen chunks for longer ones (a quarter
	// of the area, at least two). Default 16 MiB. Reads beyond what it
	// holds wait for room.
	LandingBytes int
	// SyncInterval is how often the client exchanges clock readings with
	// each server it reads, to judge the servers' leases (doc.go).
	// Default 1s.
	SyncInterval time.Duration
	// ReadTimeout is how long a read may wait for the provider before
	// the client gives the server up (its reads fail with
	// ErrDisconnected, and the next read starts afresh): a server that
	// died with reads in flight does not answer them on every provider.
	// Default 10s.
	ReadTimeout time.Duration
	// ClockDrift bounds how much faster a server's clock may run than
	// the client's (a rate, e.g. 1e-3 for 1000 ppm), for judging leases
	// between two syncs. Default 1e-3.
	ClockDrift float64
	// Logger receives connection failures. Default slog.Default().
	Logger *slog.Logger
	// TestingKnobs are test hooks; nil in production.
	TestingKnobs FabricClientKnobs
}

// FabricClientKnobs are test hooks of a fabric client.
type FabricClientKnobs struct {
	// AfterCopy fires when a read's ranges have landed, before the
	// client checks that the key is still registered. It turns fused
	// reads off (a fused read lands its ranges and its check at once).
	AfterCopy func(key Key)
	// SeparateChecks turns fused reads off: every read's check is a read
	// of its own.
	SeparateChecks bool
}

// Defaults of FabricClientOptions.
const (
	DefaultLandingBytes = 16 << 20
	DefaultSyncInterval = time.Second
	DefaultReadTimeout  = 10 * time.Second
	DefaultClockDrift   = 1e-3
)

// EnsureDefaults fills zero fields with their defaults.
func (o *FabricClientOptions) EnsureDefaults() {
	o.Limits.EnsureDefaults()
	if o.LandingBytes == 0 {
		o.LandingBytes = DefaultLandingBytes
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.ClockDrift == 0 {
		o.ClockDrift = DefaultClockDrift
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports whether the options are usable. Errors wrap
// ErrInvalidOptions.
func (o *FabricClientOptions) Validate() error {
	if err := o.Limits.Validate(); err != nil {
		return err
	}
	if err := validFabricProvider(o.Provider); err != nil {
		return err
	}
	if o.LandingBytes < landingSmall || o.LandingBytes > 1<<30 {
		return fmt.Errorf("rdma: landing area of %d bytes not in [%d, 1GiB]: %w", o.LandingBytes, landingSmall, ErrInvalidOptions)
	}
	if o.SyncInterval < time.Millisecond || o.SyncInterval > time.Minute {
		return fmt.Errorf("rdma: clock sync interval %v not in [1ms, 1m]: %w", o.SyncInterval, ErrInvalidOptions)
	}
	if o.ReadTimeout < time.Millisecond {
		return fmt.Errorf("rdma: read timeout %v under 1ms: %w", o.ReadTimeout, ErrInvalidOptions)
	}
	if o.ClockDrift < 0 || o.ClockDrift > 0.1 || math.IsNaN(o.ClockDrift) {
		return fmt.Errorf("rdma: clock drift %g not in [0, 0.1]: %w", o.ClockDrift, ErrInvalidOptions)
	}
	return nil
}

// landingLayout splits a landing area of n bytes into small slots (reads
// of up to landingSmall bytes, the check word included) and large chunks
// (up to maxRead bytes): a quarter of the area, at least two, goes to
// large chunks.
func landingLayout(n, maxRead int) (small, large, chunk int) {
	chunk = (maxRead + fabricCheckLen + landingSmall - 1) / landingSmall * landingSmall
	large = max(2, n/4/chunk)
	small = max(16, (n-large*chunk)/landingSmall)
	return small, large, chunk
}

// landingSmall is the size of a small landing slot: a node (up to 8 KiB)
// or a vector of smaller ranges, with the check word.
const landingSmall = 8 << 10

// The fabric registration table is memory the server registers for
// remote reads (never written by clients). Its layout, little-endian words
// at fixed offsets, is part of the provider's format:
//
//	0        8        12       16                                   64
//	+--------+--------+--------+------------------------------------+
//	| magic  |version | slots  |            reserved (zero)         |
//	+--------+--------+--------+------------------------------------+
//	64 + 32*i: slot i, four words:
//	    key     0 never used, key live, key | 1<<63 revoked (tombstone)
//	    lease   0 no lease, else the server's CLOCK_MONOTONIC deadline (ns)
//	    length  the registered length in bytes
//	    zero    reserved
//
// A slot's lease and length words are written before its key word, so
// that a key is never seen with another registration's lease or length.
// A client reads a slot (the check read) after each read's bytes have
// landed; see doc.go.
const (
	fabricTableMagic   = 0x31424146_4c4c4543 // "CELLFAB1" as little-endian bytes
	fabricTableVersion = 1
	fabricTableHeader  = 64
	fabricSlotLen      = 32
	// fabricCheckLen is the length of a check read: one slot.
	fabricCheckLen = fabricSlotLen

	offSlotKey   = 0
	offSlotLease = 8
	offSlotLen   = 16
)

// fabricSlotOffset returns the table offset of a slot.
func fabricSlotOffset(slot uint32) uint64 { return fabricTableHeader + fabricSlotLen*uint64(slot) }

// fabricTableSize returns the bytes of a table of n slots.
func fabricTableSize(n int) int { return fabricTableHeader + fabricSlotLen*n }

// slotImage is a slot as a check read copied it.
type slotImage struct {
	key, lease, length uint64
}

func decodeSlot(b []byte) slotImage {
	return slotImage{key: le.Uint64(b[offSlotKey:]), lease: le.Uint64(b[offSlotLease:]), length: le.Uint64(b[offSlotLen:])}
}

// judge returns the status of a read of segs under key k that this slot
// image, copied after the read, allows: the key must still hold the slot,
// and every range must lie inside the registered length (the server's
// word, not the client's copy of it). The lease is judged by the caller.
func (s slotImage) judge(k Key, segs []Segment) status {
	switch s.key {
	case uint64(k):
	case uint64(k) | keyTombstone:
		return statusRevoked
	default:
		return statusBadKey
	}
	for i := range segs {
		if checkRange(segs[i].Off, uint64(len(segs[i].Dst)), s.length) != statusOK {
			return statusOutOfBounds
		}
	}
	return statusOK
}

// fabricDesc is what a fabric RemoteKey's Desc carries: where the server's
// endpoint is, and the keys and base addresses of the region's and the
// table's registrations. Its text form is
//
//	f1|<libfabric provider>|<endpoint address, hex>|<region mr key, hex>|<region base, hex>|<table mr key, hex>|<table base, hex>
//
//	    |<incarnation, hex>
//
// where a base is the address reads name the registration's first byte
// with (its virtual address under FI_MR_VIRT_ADDR, else 0), and the
// incarnation is a random number the server drew when it started: a
// client's clock exchanges with one incarnation say nothing of another's
// clock (another host may have taken the address).
type fabricDesc struct {
	provider        string // libfabric provider name
	addr            string // raw endpoint address (fi_getname)
	key, base       uint64
	tableKey, tbase uint64
	incarnation     uint64
}

const fabricDescVersion = "f1"

func (d fabricDesc) encode() string {
	var b strings.Builder
	b.WriteString(fabricDescVersion)
	b.WriteByte('|')
	b.WriteString(d.provider)
	b.WriteByte('|')
	b.WriteString(hex.EncodeToString([]byte(d.addr)))
	for _, v := range []uint64{d.key, d.base, d.tableKey, d.tbase, d.incarnation} {
		b.WriteByte('|')
		b.WriteString(strconv.FormatUint(v, 16))
	}
	return b.String()
}

// parseFabricDesc parses a Desc. Errors wrap ErrBadKey: a RemoteKey whose
// descriptor does not parse is no good.
func parseFabricDesc(s string) (fabricDesc, error) {
	f := strings.Split(s, "|")
	if len(f) != 8 || f[0] != fabricDescVersion || f[1] == "" {
		return fabricDesc{}, fmt.Errorf("rdma: fabric descriptor %q: %w", truncate(s, 64), ErrBadKey)
	}
	addr, err := hex.DecodeString(f[2])
	if err != nil || len(addr) == 0 || len(addr) > maxFabricAddr {
		return fabricDesc{}, fmt.Errorf("rdma: fabric descriptor: endpoint address %q: %w", truncate(f[2], 64), ErrBadKey)
	}
	var v [5]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[3+i], 16, 64); err != nil {
			return fabricDesc{}, fmt.Errorf("rdma: fabric descriptor: field %d %q: %w", 3+i, truncate(f[3+i], 20), ErrBadKey)
		}
	}
	if v[4] == 0 {
		return fabricDesc{}, fmt.Errorf("rdma: fabric descriptor: no incarnation: %w", ErrBadKey)
	}
	return fabricDesc{provider: f[1], addr: string(addr), key: v[0], base: v[1], tableKey: v[2], tbase: v[3], incarnation: v[4]}, nil
}

// maxFabricAddr bounds a raw endpoint address (fi_getname; the largest
// libfabric formats are well under it).
const maxFabricAddr = 256

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Clock messages. A fabric client judges a server's lease, a deadline on
// the server's CLOCK_MONOTONIC, with its own clock: it sends a request at
// its time c, the server answers with its time s (read when it handles the
// request, so after c), and from then on the server's clock at the
// client's time t is at most s + (t-c)(1+drift) (clockSync.bound). The
// request carries the client's endpoint address, so that the server can
// answer a client it has not met. Frames are little-endian:
//
//	request: magic u32 | type u8 (1) | rsv u8 | addr length u16 | nonce u64 | addr bytes
//	reply:   magic u32 | type u8 (2) | rsv u8 | rsv u16         | nonce u64 | server time i64 | incarnation u64
const (
	clockMagic      = 0x4b4c4346 // "FCLK"
	clockRequest    = 1
	clockReply      = 2
	clockHeader     = 16
	clockReplyLen   = clockHeader + 16
	clockMsgMax     = clockHeader + maxFabricAddr
	fabricMsgBuffer = 512 // a message buffer: room for any clock frame
)

// encodeClockRequest writes a request into b (at least clockMsgMax bytes)
// and returns its length.
func encodeClockRequest(b []byte, nonce uint64, addr string) int {
	le.PutUint32(b[0:], clockMagic)
	b[4], b[5] = clockRequest, 0
	le.PutUint16(b[6:], uint16(len(addr)))
	le.PutUint64(b[8:], nonce)
	return clockHeader + copy(b[clockHeader:], addr)
}

// decodeClockRequest parses a request; ok is false for anything else.
func decodeClockRequest(b []byte) (nonce uint64, addr string, ok bool) {
	if len(b) < clockHeader || le.Uint32(b) != clockMagic || b[4] != clockRequest || b[5] != 0 {
		return 0, "", false
	}
	n := int(le.Uint16(b[6:]))
	if n == 0 || n > maxFabricAddr || len(b) != clockHeader+n {
		return 0, "", false
	}
	return le.Uint64(b[8:]), string(b[clockHeader:]), true
}

// encodeClockReply writes a reply into b and returns its length.
func encodeClockReply(b []byte, nonce uint64, now int64, incarnation uint64) int {
	le.PutUint32(b[0:], clockMagic)
	b[4], b[5] = clockReply, 0
	le.PutUint16(b[6:], 0)
	le.PutUint64(b[8:], nonce)
	le.PutUint64(b[16:], uint64(now))
	le.PutUint64(b[24:], incarnation)
	return clockReplyLen
}

// decodeClockReply parses a reply.
func decodeClockReply(b []byte) (nonce uint64, now int64, incarnation uint64, ok bool) {
	if len(b) != clockReplyLen || le.Uint32(b) != clockMagic || b[4] != clockReply || b[5] != 0 || le.Uint16(b[6:]) != 0 {
		return 0, 0, 0, false
	}
	return le.Uint64(b[8:]), int64(le.Uint64(b[16:])), le.Uint64(b[24:]), true
}

// clockSync is one clock exchange with a server: the client sent its
// request at its time sent, and the server read server on its clock after
// that. The zero value means none yet.
type clockSync struct {
	sent, server int64
}

func (c clockSync) valid() bool { return c.sent != 0 }

// bound returns an upper bound of the server's clock at the client's time
// now: server time passes at most 1+drift times as fast as the client's.
// A time before the exchange is bounded by the server's reading, which
// came later.
func (c clockSync) bound(now int64, drift float64) int64 {
	if now <= c.sent {
		return c.server
	}
	d := float64(now - c.sent)
	return c.server + int64(d+d*drift) + 1
}

// leaseHolds reports whether a lease word read from a slot still held at
// the client's time now (when the read that copied it had completed).
func leaseHolds(lease uint64, c clockSync, now int64, drift float64) bool {
	if lease == 0 {
		return true // no lease: the server's only voter
	}
	return c.valid() && lease <= math.MaxInt64 && c.bound(now, drift) <= int64(lease)
}

// FabricKeyProvider returns the libfabric provider a fabric RemoteKey was
// registered with ("tcp;ofi_rxm"), or "" when rk is not a valid fabric
// key. A client reads only the keys of its own libfabric provider.
func FabricKeyProvider(rk *RemoteKey) string {
	if rk == nil || rk.Provider != ProviderFabric {
		return ""
	}
	d, err := parseFabricDesc(rk.Desc)
	if err != nil {
		return ""
	}
	return d.provider
}
