package rdma

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
)

// Key identifies one registration of a region with a provider's server.
// Keys are random 63-bit numbers (the top bit is zero, zero is never a key),
// so a key from an earlier registration, of this or an earlier server
// incarnation, does not match a later one.
type Key uint64

func (k Key) String() string { return fmt.Sprintf("%#016x", uint64(k)) }

// keyTombstone marks a revoked key where a provider stores keys in memory
// that clients read (the shm registration table).
const keyTombstone = 1 << 63

// newKey returns a fresh random key for which taken is false.
func newKey(taken func(Key) bool) Key {
	var b [8]byte
	for {
		_, _ = crand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
		k := Key(binary.LittleEndian.Uint64(b[:]) &^ keyTombstone)
		if k != 0 && !taken(k) {
			return k
		}
	}
}

// Region is memory a Server exposes to one-sided reads. *meganode.Region
// implements it.
type Region interface {
	// ID is the region's cluster-unique 24-bit ID.
	ID() uint32
	// Bytes is the region's memory: 8-byte aligned, a multiple of 8 long,
	// valid until the region is closed. Providers only read it, with 8-byte
	// atomic loads.
	Bytes() []byte
	// Path is the file the memory is mapped from ("" for heap memory); a
	// same-host client of the shm provider maps it read-only.
	Path() string
}

// RemoteKey is everything a client needs to read a registered region: the
// key, and the provider's descriptor of where the region is. Servers publish
// it (in the region table); clients treat it as an opaque, immutable value
// and pass it back to Read. The JSON form is stable.
type RemoteKey struct {
	// Provider is the name of the provider that registered the region.
	Provider string `json:"provider"`
	// Key is the registration's key.
	Key Key `json:"key"`
	// Region is the region's ID.
	Region uint32 `json:"region"`
	// Len is the registered length in bytes: reads must lie in [0, Len).
	Len uint64 `json:"len"`

	// Addr is the network address of the responder (tcp).
	Addr string `json:"addr,omitempty"`

	// Host is the host identity of the server (shm): a client reads over
	// shared memory only if its own identity is the same.
	Host string `json:"host,omitempty"`
	// Path is the region file a same-host client maps read-only (shm).
	Path string `json:"path,omitempty"`
	// Dev and Ino identify the region file, so that a client never maps
	// another file that took its path (shm).
	Dev uint64 `json:"dev,omitempty"`
	Ino uint64 `json:"ino,omitempty"`
	// Table is the server's registration table file, and Slot the index of
	// the word in it that holds Key while the registration is live (shm).
	Table string `json:"table,omitempty"`
	Slot  uint32 `json:"slot,omitempty"`

	// Desc is an opaque descriptor for providers that need more (a
	// libfabric provider's raw endpoint address and the region's remote
	// base address). Unused by tcp and shm. A string, so that RemoteKeys
	// stay comparable with ==.
	Desc string `json:"desc,omitempty"`
}

func (rk *RemoteKey) String() string {
	where := rk.Addr
	if rk.Provider == ProviderSHM {
		where = rk.Host + ":" + rk.Path
	}
	return fmt.Sprintf("%s region %d key %v (%s at %s)", rk.Provider, rk.Region, rk.Key, byteSize(int(min(rk.Len, 1<<62))), where)
}

// Segment is one range of a vector read: len(Dst) bytes at offset Off of the
// region land in Dst.
type Segment struct {
	Off uint64
	Dst []byte
}

// Server is the server side of a provider: it registers regions for
// one-sided reads. It is safe for concurrent use.
type Server interface {
	// Provider returns the provider's name ("tcp", "shm").
	Provider() string
	// Caps returns what the provider guarantees.
	Caps() Caps
	// Register exposes r to one-sided reads and returns the RemoteKey
	// clients need. A region may be registered several times; each
	// registration has its own key. r must stay open (its memory mapped)
	// until Deregister of every key returned for it has returned.
	// Errors: ErrMisaligned (r.Bytes() not 8-byte aligned or not a
	// multiple of 8 long), ErrNotShareable (shm: r has no file), ErrClosed.
	Register(r Region) (RemoteKey, error)
	// Deregister revokes k at once. When it returns, no read of k succeeds
	// any more: a read that was copying while Deregister ran fails with
	// ErrRevoked, later ones with ErrRevoked (or ErrBadKey once the provider
	// has forgotten k), and the provider no longer touches the region's
	// memory, so the caller may close the region. docs/design.md §9: a server calls
	// it the moment it loses a region's read lease. Error: ErrBadKey if k
	// is not registered.
	Deregister(k Key) error
	// SetLease sets k's read lease (docs/design.md §9: "One-sided reads are
	// fenced"): a read whose copy ends after until, a monotime.Now
	// reading (the host's CLOCK_MONOTONIC), fails with ErrRevoked, until
	// a later SetLease extends it; 0 removes the lease. The provider
	// judges it at every read, without the server's help, so that a
	// paused or deposed leader's memory is never read after its lease.
	// Error: ErrBadKey if k is not registered.
	SetLease(k Key, until int64) error
	// Close deregisters every key and releases the provider's resources;
	// reads in flight fail with a typed error (ErrDisconnected over a
	// network, ErrRevoked over shared memory). Closing twice is a no-op.
	Close() error
}

// Client is the client side of a provider. It is safe for concurrent use.
//
// # Ownership of destination buffers
//
// A destination (dst, or the Dst of each segment) belongs to the provider
// from the call (Read, ReadV, Post) until the read completes: Read and ReadV
// return, or the op's completion is taken from its CQ. Until then the
// caller must not read, write or free it; afterwards the provider never
// touches it again, even when the read failed or its context was cancelled
// (a late reply is discarded). Destinations may be any memory the process
// can write, including memory outside the Go heap (a mapped landing area, C
// memory), need no alignment, and are written with plain stores: the
// atomicity that matters (8-byte words, increasing addresses, docs/design.md §3) is
// that of the copy out of the region, done by the provider.
//
// On error a destination holds unspecified bytes. On success it holds the
// region's bytes as copied under Caps.OrderedReads: a node read this way is
// then checked with blink.CheckCopy, an extent with its CRC.
type Client interface {
	// Provider returns the provider's name.
	Provider() string
	// Caps returns what the provider guarantees.
	Caps() Caps
	// Read copies len(dst) bytes at offset off of the region registered as
	// rk into dst. off and len(dst) must be multiples of 8 and the range
	// inside [0, rk.Len). ctx bounds the wait; when it ends first, Read
	// returns ctx.Err() (wrapped) and dst is no longer touched.
	Read(ctx context.Context, rk *RemoteKey, off uint64, dst []byte) error
	// ReadV reads every segment, in one request when the provider has
	// VectorReads. It succeeds or fails as a whole. A ReadV of no segments
	// does nothing.
	ReadV(ctx context.Context, rk *RemoteKey, segs []Segment) error
	// Post starts op (see Op) and returns at once; its completion is
	// delivered to cq. If Post returns an error, nothing was started and
	// no completion will come. An op of no segments completes at once. ctx bounds the read as for Read: when it
	// ends first, the op completes with ctx.Err() (wrapped).
	Post(ctx context.Context, op *Op, cq *CQ) error
	// Close fails reads in flight with ErrClosed and releases the client's
	// connections and mappings. Later calls fail with ErrClosed.
	Close() error
}

// Limits bound the requests of a provider. The zero value of every field
// means its default.
type Limits struct {
	// MaxReadLen is the most bytes one request may read (all of a vector
	// read's segments together). Default 2 MiB: a whole extent holding a
	// value of the store's 1 MiB maximum with its key (docs/design.md §2).
	MaxReadLen int
	// MaxSegments is the most ranges in one vector read. Default 64.
	MaxSegments int
}

// Defaults and bounds of Limits.
const (
	DefaultMaxReadLen  = 2 << 20
	DefaultMaxSegments = 64
	// MaxReadLenLimit bounds Limits.MaxReadLen (tcp frames have 32-bit
	// lengths; a responder buffers one reply whole).
	MaxReadLenLimit = 256 << 20
	// MaxSegmentsLimit bounds Limits.MaxSegments (a 16-bit field in tcp
	// frames).
	MaxSegmentsLimit = 1<<16 - 1
)

// EnsureDefaults fills zero fields with their defaults.
func (l *Limits) EnsureDefaults() {
	if l.MaxReadLen == 0 {
		l.MaxReadLen = DefaultMaxReadLen
	}
	if l.MaxSegments == 0 {
		l.MaxSegments = DefaultMaxSegments
	}
}

// Validate reports whether the limits are usable. Errors wrap
// ErrInvalidOptions.
func (l *Limits) Validate() error {
	if l.MaxReadLen < 8 || l.MaxReadLen > MaxReadLenLimit {
		return fmt.Errorf("rdma: max read length %d not in [8, %d]: %w", l.MaxReadLen, MaxReadLenLimit, ErrInvalidOptions)
	}
	if l.MaxSegments < 1 || l.MaxSegments > MaxSegmentsLimit {
		return fmt.Errorf("rdma: max segments %d not in [1, %d]: %w", l.MaxSegments, MaxSegmentsLimit, ErrInvalidOptions)
	}
	return nil
}

// checkRange checks one range of n bytes at off against a region of length
// bytes. It does not allocate.
func checkRange(off, n, length uint64) status {
	switch {
	case off%8 != 0 || n%8 != 0:
		return statusMisaligned
	case off > length || n > length-off:
		return statusOutOfBounds
	}
	return statusOK
}

// checkSegments checks a vector read against a region of length bytes and
// the limits, in the order a responder does, and returns its total length.
func checkSegments(segs []Segment, length uint64, lim *Limits) (int, error) {
	if len(segs) > lim.MaxSegments {
		return 0, fmt.Errorf("rdma: %d segments, limit %d: %w", len(segs), lim.MaxSegments, ErrTooManySegments)
	}
	total := uint64(0)
	for i := range segs {
		s := &segs[i]
		n := uint64(len(s.Dst))
		if st := checkRange(s.Off, n, length); st != statusOK {
			return 0, fmt.Errorf("rdma: segment %d: %d bytes at offset %d of a %d-byte region: %w", i, n, s.Off, length, st.err())
		}
		total += n
	}
	if total > uint64(lim.MaxReadLen) {
		return 0, fmt.Errorf("rdma: read of %d bytes, limit %d: %w", total, lim.MaxReadLen, ErrTooLarge)
	}
	return int(total), nil
}

// status is the outcome of a read as a provider judges it. The values are
// part of the tcp frame format (tcp_frame.go): do not renumber.
type status uint8

const (
	statusOK status = iota
	statusBadKey
	statusRevoked
	statusOutOfBounds
	statusMisaligned
	statusTooLarge
	statusTooManySegments
	numStatuses
)

var statusNames = [...]string{"ok", "bad-key", "revoked", "out-of-bounds", "misaligned", "too-large", "too-many-segments"}

func (s status) String() string {
	if s < numStatuses {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// err returns the sentinel of a failed status (nil for statusOK).
func (s status) err() error {
	switch s {
	case statusOK:
		return nil
	case statusBadKey:
		return ErrBadKey
	case statusRevoked:
		return ErrRevoked
	case statusOutOfBounds:
		return ErrOutOfBounds
	case statusMisaligned:
		return ErrMisaligned
	case statusTooLarge:
		return ErrTooLarge
	case statusTooManySegments:
		return ErrTooManySegments
	}
	return ErrProtocol
}
