package rdma

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/cellstore/cell/internal/atomicmem"
)

// The shm provider's registration table is a small file the server maps
// read-write and same-host clients map read-only (doc.go explains the
// protocol). Its layout, little-endian words at fixed offsets, is part of
// the provider's format:
//
//	0        8        12       16                                   64
//	+--------+--------+--------+------------------------------------+
//	| magic  |version | slots  |            reserved (zero)         |
//	+--------+--------+--------+------------------------------------+
//	64: slots words: slot i at 64 + 8*i
//	    0               never used
//	    key             the registration holding the slot is live
//	    key | 1<<63     that registration was revoked (a tombstone)
//	64 + 8*slots: slots lease words: slot i's at 64 + 8*slots + 8*i
//	    0               no lease
//	    t               reads that end after CLOCK_MONOTONIC t (ns) fail
//
// A lease word is written before its slot's key, so that a key is never
// seen with another registration's lease.
const (
	tableMagic   = 0x31474552_4c4c4543 // "CELLREG1" as little-endian bytes
	tableVersion = 2
	tableHeader  = 64

	offTableMagic   = 0
	offTableVersion = 8
	offTableSlots   = 12
)

// SHMOptions configure a shm server. The zero value of every field means
// its default.
type SHMOptions struct {
	// Dir is where the registration table file is created. Default
	// /dev/shm when usable, else os.TempDir(). Clients open the file by
	// the path in the RemoteKey, so Dir must be visible to them under the
	// same path (same mount namespace).
	Dir string
	// Slots is the number of registrations the table holds at once. A
	// revoked slot is reused last (FIFO), so its tombstone answers
	// ErrRevoked for as long as possible. Default 1024.
	Slots int
	// Host is this host's identity, copied into every RemoteKey: a client
	// reads over shared memory only when its own identity is the same.
	// Default HostID().
	Host string
	// FileGroup, if positive, is the group ID that the registration
	// table file is given, with mode 0640, so that clients running as
	// other users of the group can read it (the region files need the
	// same: meganode.Options.FileGroup). Default 0: mode 0600.
	FileGroup int
	// Limits are advertised in Caps; clients enforce their own.
	Limits
	// Logger receives the table's creation. Default slog.Default().
	Logger *slog.Logger
}

// DefaultSHMSlots is the default size of a registration table.
const DefaultSHMSlots = 1024

// EnsureDefaults fills zero fields with their defaults.
func (o *SHMOptions) EnsureDefaults() {
	o.Limits.EnsureDefaults()
	if o.Dir == "" {
		o.Dir = defaultTableDir()
	}
	if o.Slots == 0 {
		o.Slots = DefaultSHMSlots
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports whether the options are usable. Errors wrap
// ErrInvalidOptions.
func (o *SHMOptions) Validate() error {
	if err := o.Limits.Validate(); err != nil {
		return err
	}
	if o.Slots < 1 || o.Slots > 1<<20 {
		return fmt.Errorf("rdma: %d registration slots not in [1, %d]: %w", o.Slots, 1<<20, ErrInvalidOptions)
	}
	if o.FileGroup < 0 {
		return fmt.Errorf("rdma: file group %d: %w", o.FileGroup, ErrInvalidOptions)
	}
	return nil
}

// SHMServer is the server side of the shm provider. Registering a region
// writes its key into a slot of the registration table; deregistering
// overwrites the slot with the key's tombstone. The server's CPU does
// nothing per read: same-host clients map the region file and the table
// themselves (SHMClient).
type SHMServer struct {
	opts  SHMOptions
	host  string
	path  string   // the registration table file
	table []byte   // its read-write mapping
	lock  *os.File // the table file, flock'ed while the server runs

	mu struct {
		sync.Mutex
		closed bool
		live   map[Key]uint32 // slot of every live key
		free   []uint32       // revoked slots, oldest revocation first
		fresh  uint32         // slots below fresh have been used
	}
}

var _ Server = (*SHMServer)(nil)

// NewSHMServer creates the server's registration table file (in opts.Dir,
// a fresh name: cell-rdma-<pid>-<nonce>), locks it (flock, until Close)
// and maps it. It first removes the tables in opts.Dir that processes
// killed without closing theirs left: a dead pid's, unlocked.
func NewSHMServer(opts SHMOptions) (*SHMServer, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	host := opts.Host
	if host == "" {
		var err error
		if host, err = HostID(); err != nil {
			return nil, err
		}
	}
	if stale, err := RemoveStaleTables(opts.Dir); err != nil {
		opts.Logger.Warn("rdma: removing the registration tables of dead processes", slog.Any("err", err))
	} else if len(stale) > 0 {
		opts.Logger.Info("rdma: removed the registration tables of dead processes", slog.Any("paths", stale))
	}
	size := tableHeader + 16*opts.Slots
	path, table, lock, err := createTable(opts.Dir, size, opts.FileGroup)
	if err != nil {
		return nil, err
	}
	le.PutUint32(table[offTableVersion:], tableVersion)
	le.PutUint32(table[offTableSlots:], uint32(opts.Slots))
	atomicmem.StoreUint64(table, offTableMagic, tableMagic) // last: a table is valid once its magic is there
	s := &SHMServer{opts: opts, host: host, path: path, table: table, lock: lock}
	s.mu.live = make(map[Key]uint32)
	opts.Logger.Info("rdma: shm registration table created", slog.String("path", path), slog.Int("slots", opts.Slots), slog.String("host", host))
	return s, nil
}

// TablePath returns the registration table file's path.
func (s *SHMServer) TablePath() string { return s.path }

// Provider returns "shm".
func (s *SHMServer) Provider() string { return ProviderSHM }

// Caps returns the shm provider's capabilities.
func (s *SHMServer) Caps() Caps { return shmCaps(s.opts.Limits) }

func shmCaps(l Limits) Caps {
	return Caps{OrderedReads: true, VectorReads: true, SparesServerCPU: true, SameHostOnly: true, InOrderCompletion: true,
		MaxReadLen: l.MaxReadLen, MaxSegments: l.MaxSegments}
}

// Register publishes a fresh key for region in a table slot. The region
// must be backed by a file (Path) that clients on this host can open for
// reading (the same user, or group/other read permission).
func (s *SHMServer) Register(region Region) (RemoteKey, error) {
	mem := region.Bytes()
	if !atomicmem.Aligned(mem) || len(mem)%atomicmem.Word != 0 {
		return RemoteKey{}, fmt.Errorf("rdma: region %d memory not 8-byte aligned: %w", region.ID(), ErrMisaligned)
	}
	if region.Path() == "" {
		return RemoteKey{}, fmt.Errorf("rdma: region %d: %w", region.ID(), ErrNotShareable)
	}
	path, err := filepath.Abs(region.Path())
	if err != nil {
		return RemoteKey{}, fmt.Errorf("rdma: region %d file: %w", region.ID(), err)
	}
	dev, ino, size, err := statFile(path)
	if err != nil {
		return RemoteKey{}, fmt.Errorf("rdma: region %d file: %w: %w", region.ID(), err, ErrNotShareable)
	}
	if size < int64(len(mem)) {
		return RemoteKey{}, fmt.Errorf("rdma: region %d file %s has %d bytes, memory %d: %w", region.ID(), path, size, len(mem), ErrNotShareable)
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
	prev := Key(atomicmem.LoadUint64(s.table, slotOffset(slot)) &^ keyTombstone)
	k := newKey(func(k Key) bool { _, ok := s.mu.live[k]; return ok || k == prev })
	s.mu.live[k] = slot
	atomicmem.StoreUint64(s.table, leaseOffset(uint32(s.opts.Slots), slot), 0)
	atomicmem.StoreUint64(s.table, slotOffset(slot), uint64(k))
	return RemoteKey{
		Provider: ProviderSHM, Key: k, Region: region.ID(), Len: uint64(len(mem)),
		Host: s.host, Path: path, Dev: dev, Ino: ino, Table: s.path, Slot: slot,
	}, nil
}

// SetLease sets k's read lease: reads that end after until (a
// monotime.Now reading, CLOCK_MONOTONIC, which every process on the host
// shares) fail as revoked, until a later SetLease extends it; 0 removes
// the lease. Readers judge it themselves after every copy, so a server
// that stops renewing it (paused, deposed, cut off) fences its region
// without doing anything.
func (s *SHMServer) SetLease(k Key, until int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	slot, ok := s.mu.live[k]
	if !ok {
		return fmt.Errorf("rdma: lease of %v: %w", k, ErrBadKey)
	}
	atomicmem.StoreUint64(s.table, leaseOffset(uint32(s.opts.Slots), slot), uint64(until))
	return nil
}

// Deregister overwrites k's slot with its tombstone. Clients check the
// slot after every copy, so from the store on no read of k succeeds: the
// revocation is one atomic store, immediate, with no waiting.
func (s *SHMServer) Deregister(k Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	slot, ok := s.mu.live[k]
	if !ok {
		return fmt.Errorf("rdma: deregister %v: %w", k, ErrBadKey)
	}
	atomicmem.StoreUint64(s.table, slotOffset(slot), uint64(k)|keyTombstone)
	delete(s.mu.live, k)
	s.mu.free = append(s.mu.free, slot)
	return nil
}

// Close revokes every registration, unmaps the table and removes its
// file. Clients that have it mapped keep seeing the tombstones (ErrRevoked);
// clients that open it later find no file (ErrBadKey).
func (s *SHMServer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	s.mu.closed = true
	for k, slot := range s.mu.live {
		atomicmem.StoreUint64(s.table, slotOffset(slot), uint64(k)|keyTombstone)
	}
	s.mu.live = nil
	err := unmap(s.table)
	s.table = nil
	if rerr := removeFile(s.path); err == nil {
		err = rerr
	}
	if cerr := s.lock.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("rdma: close shm server: %w", err)
	}
	return nil
}

// slotOffset returns the table offset of a slot's word.
func slotOffset(slot uint32) int { return tableHeader + 8*int(slot) }

// leaseOffset returns the table offset of a slot's lease word, in a table
// of slots slots.
func leaseOffset(slots, slot uint32) int { return tableHeader + 8*int(slots) + 8*int(slot) }
