package rdma

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/internal/monotime"
)

// SHMClientOptions configure a shm client. The zero value of every field
// means its default.
type SHMClientOptions struct {
	// Host is this host's identity; only remote keys with the same Host
	// are read. Default HostID().
	Host string
	// Limits are checked on every read, as a responder would. Defaults:
	// see Limits.
	Limits
	// TestingKnobs are test hooks; nil in production.
	TestingKnobs SHMClientKnobs
}

// SHMClientKnobs are test hooks of a shm client.
type SHMClientKnobs struct {
	// AfterCopy fires when a read's ranges have been copied, before the
	// client checks that the key is still registered.
	AfterCopy func(key Key)
}

// EnsureDefaults fills zero fields with their defaults.
func (o *SHMClientOptions) EnsureDefaults() { o.Limits.EnsureDefaults() }

// Validate reports whether the options are usable.
func (o *SHMClientOptions) Validate() error { return o.Limits.Validate() }

// SHMClient is the client side of the shm provider: it maps region files
// and registration tables of servers on its host read-only (once per file,
// kept until Close) and copies with 8-byte atomic loads in increasing
// address order, then checks the key's table slot: a read succeeds only if
// the key was still registered after the copy ended. Reads complete in the
// calling goroutine; no server thread is involved.
type SHMClient struct {
	opts   SHMClientOptions
	host   string
	maps   atomic.Pointer[map[string]*fileMap] // by path; replaced under mu
	mu     sync.Mutex
	closed atomic.Bool
}

var _ Client = (*SHMClient)(nil)

// fileMap is one read-only mapping of a file.
type fileMap struct {
	path     string
	data     []byte
	dev, ino uint64
	// refs is 1 for the cache while the map is cached, plus 1 per read
	// using it; the mapping is unmapped when it drops to 0.
	refs atomic.Int64
}

func (m *fileMap) tryRef() bool {
	for {
		r := m.refs.Load()
		if r <= 0 {
			return false
		}
		if m.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

func (m *fileMap) unref() {
	if m.refs.Add(-1) == 0 {
		_ = unmap(m.data)
	}
}

// NewSHMClient returns a shm client.
func NewSHMClient(opts SHMClientOptions) (*SHMClient, error) {
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
	c := &SHMClient{opts: opts, host: host}
	c.maps.Store(&map[string]*fileMap{})
	return c, nil
}

// Provider returns "shm".
func (c *SHMClient) Provider() string { return ProviderSHM }

// Caps returns the shm provider's capabilities with the client's limits.
func (c *SHMClient) Caps() Caps { return shmCaps(c.opts.Limits) }

// Read implements Client. It does not allocate once the files are mapped.
func (c *SHMClient) Read(ctx context.Context, rk *RemoteKey, off uint64, dst []byte) error {
	segs := [1]Segment{{Off: off, Dst: dst}}
	return c.read(ctx, rk, segs[:])
}

// ReadV implements Client.
func (c *SHMClient) ReadV(ctx context.Context, rk *RemoteKey, segs []Segment) error {
	if len(segs) == 0 {
		return nil
	}
	return c.read(ctx, rk, segs)
}

// Post implements Client: the read is done before Post returns, and its
// completion is already in cq.
func (c *SHMClient) Post(ctx context.Context, op *Op, cq *CQ) error {
	if err := c.check(op.Remote, op.Segs); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctxErr(ctx)
	default:
	}
	if _, err := op.begin(cq); err != nil {
		return err
	}
	op.complete(c.read(ctx, op.Remote, op.Segs))
	return nil
}

// check validates a read's arguments.
func (c *SHMClient) check(rk *RemoteKey, segs []Segment) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if rk == nil || rk.Provider != ProviderSHM {
		return wrongProvider(ProviderSHM, rk)
	}
	if rk.Host != c.host {
		return fmt.Errorf("rdma: region %d is on host %q, this is %q: %w", rk.Region, rk.Host, c.host, ErrNotSameHost)
	}
	_, err := checkSegments(segs, rk.Len, &c.opts.Limits)
	return err
}

// read copies segs out of rk's region file and validates the key after the
// copy. segs does not escape.
func (c *SHMClient) read(ctx context.Context, rk *RemoteKey, segs []Segment) error {
	if err := c.check(rk, segs); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctxErr(ctx)
	default:
	}
	tab, err := c.acquire(rk.Table, 0, 0, true)
	if err != nil {
		return err
	}
	reg, err := c.acquire(rk.Path, rk.Dev, rk.Ino, false)
	if err != nil {
		tab.unref()
		return err
	}
	st := c.copy(tab, reg, rk, segs)
	reg.unref()
	tab.unref()
	if st != statusOK {
		return c.readErr(st, rk, len(reg.data), len(tab.data))
	}
	return nil
}

// copy copies segs out of the region mapping if the key's slot in the table
// holds the key before and after the copy.
func (c *SHMClient) copy(tab, reg *fileMap, rk *RemoteKey, segs []Segment) status {
	slots := le.Uint32(tab.data[offTableSlots:])
	if rk.Slot >= slots {
		return statusBadKey
	}
	slot := slotOffset(rk.Slot)
	// A revoked key is refused before touching the region (not needed for
	// correctness: the check after the copy is the one that counts).
	if st := keyState(tab.data, slot, rk.Key); st != statusOK {
		return st
	}
	if uint64(len(reg.data)) < rk.Len {
		return statusOutOfBounds
	}
	for i := range segs {
		s := &segs[i]
		src := reg.data[s.Off : s.Off+uint64(len(s.Dst))]
		if atomicmem.Aligned(s.Dst) {
			atomicmem.Load(s.Dst, src)
		} else {
			atomicmem.LoadTo(s.Dst, src)
		}
	}
	if hook := c.opts.TestingKnobs.AfterCopy; hook != nil {
		hook(rk.Key)
	}
	// The copy's loads all precede this load (Go's atomics are sequentially
	// consistent, also across processes sharing the pages): if the key is
	// still there, every byte was copied while the registration was live;
	// if its lease had not ended when it was checked, while it was leased.
	if st := keyState(tab.data, slot, rk.Key); st != statusOK {
		return st
	}
	if lu := atomicmem.LoadUint64(tab.data, leaseOffset(slots, rk.Slot)); lu != 0 && monotime.Now() > int64(lu) {
		return statusRevoked
	}
	return statusOK
}

// readErr is the error of a failed copy.
func (c *SHMClient) readErr(st status, rk *RemoteKey, fileLen, tableLen int) error {
	switch st {
	case statusOutOfBounds:
		return fmt.Errorf("rdma: region file %s has %d bytes, registered %d: %w", rk.Path, fileLen, rk.Len, ErrOutOfBounds)
	case statusBadKey:
		return fmt.Errorf("rdma: shm read of region %d: key %v not in slot %d of %s (%d bytes): %w", rk.Region, rk.Key, rk.Slot, rk.Table, tableLen, ErrBadKey)
	}
	return fmt.Errorf("rdma: shm read of region %d: %w", rk.Region, st.err())
}

// keyState judges the table word at off for key k.
func keyState(table []byte, off int, k Key) status {
	switch atomicmem.LoadUint64(table, off) {
	case uint64(k):
		return statusOK
	case uint64(k) | keyTombstone:
		return statusRevoked
	}
	return statusBadKey
}

// acquire returns a referenced read-only mapping of path, mapping it on
// first use. A region file must have the given device and inode (a file
// that replaced it is never read); a table file must start with a valid
// header.
func (c *SHMClient) acquire(path string, dev, ino uint64, table bool) (*fileMap, error) {
	for {
		if m := (*c.maps.Load())[path]; m != nil && (table || m.dev == dev && m.ino == ino) && m.tryRef() {
			return m, nil
		}
		if err := c.mapFile(path, dev, ino, table); err != nil {
			return nil, err
		}
	}
}

// mapFile maps path and caches the mapping, replacing (and releasing) a
// cached mapping of a file that path no longer names.
func (c *SHMClient) mapFile(path string, dev, ino uint64, table bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return ErrClosed
	}
	old := *c.maps.Load()
	if m := old[path]; m != nil && (table || m.dev == dev && m.ino == ino) {
		return nil // mapped meanwhile
	}
	data, fdev, fino, err := mapReadOnly(path)
	if err != nil {
		if table {
			return fmt.Errorf("rdma: registration table: %w: %w", err, ErrBadKey)
		}
		return fmt.Errorf("rdma: region file: %w: %w", err, ErrBadKey)
	}
	switch {
	case table && (len(data) < tableHeader || atomicmem.LoadUint64(data, offTableMagic) != tableMagic ||
		le.Uint32(data[offTableVersion:]) != tableVersion ||
		uint64(len(data)) < uint64(tableHeader)+16*uint64(le.Uint32(data[offTableSlots:]))):
		_ = unmap(data)
		return fmt.Errorf("rdma: %s is not a registration table: %w", path, ErrBadKey)
	case !table && (fdev != dev || fino != ino):
		_ = unmap(data)
		return fmt.Errorf("rdma: region file %s was replaced (inode %d:%d, registered %d:%d): %w", path, fdev, fino, dev, ino, ErrBadKey)
	}
	m := &fileMap{path: path, data: data, dev: fdev, ino: fino}
	m.refs.Store(1)
	next := maps.Clone(old)
	next[path] = m
	c.maps.Store(&next)
	if prev := old[path]; prev != nil {
		prev.unref()
	}
	return nil
}

// Close implements Client: later reads fail with ErrClosed; each mapping is
// unmapped once the reads using it have finished.
func (c *SHMClient) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.mu.Lock()
	old := *c.maps.Swap(&map[string]*fileMap{})
	c.mu.Unlock()
	for _, m := range old {
		m.unref()
	}
	return nil
}
