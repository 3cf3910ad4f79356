package rsm

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
)

// Machine is the replicated state machine of one region: the region's
// file of meganodes, the table of its meganodes, and the State beside the
// image, changed only by Apply (and replaced whole by Restore), in log
// order. A server holds one Machine per replica it holds, leader or
// follower; every replica of a region applies the same records to its
// Machine and ends byte-identical.
//
// Readers (server-side searches, one-sided reads of the region's memory)
// never take the Machine's lock: blink's readers are lock-free, and the
// meganode table is an immutable snapshot swapped atomically.
//
// Its methods are Apply and one per step a record can take (apply.go,
// split.go, target.go: about 25), Snapshot and Restore with theirs, and
// the readers' accessors; its fields are the region, its meganode table
// and the State, with their locks.
type Machine struct {
	id         uint32
	files      Files
	log        *slog.Logger
	onApply    func(index uint64, rec []byte, kind string, err error)
	onSnapshot func(region *meganode.Region)

	// mu serialises every write to the region and to state: Apply,
	// Restore, and the readers that need one applied index's view
	// (Capture, Locked).
	mu sync.Mutex
	// region is the region's file. Replaced (under mu) by a region
	// record that pins other sizes and by Restore; readers load it with
	// Region.
	region   *meganode.Region
	current  atomic.Pointer[meganode.Region]
	nodeSize int
	maxKey   int

	megas  atomic.Pointer[meganodeTable]
	megaMu sync.Mutex // serialises changes to megas and meganode slots

	applied atomic.Uint64 // the last applied log index, for readers
	state   State         // guarded by mu
	// targets are the remote split targets in the region (target.go),
	// kept by apply. Guarded by mu.
	targets map[blink.Ptr]*targetState
	ended   []endedTarget // the last targets that ended (target.go)
	// condBuf holds the value a cond record compares (apply.go).
	// Guarded by mu.
	condBuf []byte
	// closed: the machine's region was closed for good (Close).
	// Guarded by mu.
	closed bool
}

// Files is where a Machine's region files live: the server's data
// directory, memory backing and naming. The Machine decides when a
// region file is made, replaced or dropped; Files does it.
type Files interface {
	// Create makes region id's file, empty, with layout l, in place of
	// any file of its name.
	Create(id uint32, l Layout) (*meganode.Region, error)
	// ReadImage reads a region image into a new file for region id,
	// apart from the region's own file (which it must not touch), and
	// returns it opened.
	ReadImage(id uint32, img io.Reader) (*meganode.Region, error)
	// Install closes r, a region ReadImage returned, and puts its file
	// in the place of region id's file (which the Machine discarded
	// before), and returns it opened again.
	Install(id uint32, r *meganode.Region) (*meganode.Region, error)
	// Discard removes region r's file, and unmaps it or, while requests
	// may still read it, keeps it mapped until they cannot.
	Discard(r *meganode.Region) error
}

// Config makes a Machine.
type Config struct {
	// Region is the region's file, empty as Files.Create made it, or
	// holding what earlier records applied (tests that replay a log).
	Region *meganode.Region
	// Files makes and drops the region's files.
	Files Files
	// Logger gets the rare events of apply (a region made anew with its
	// log's sizes, a snapshot restored).
	Logger *slog.Logger
	// OnApply, when set, is called under the apply lock after each
	// record with its log index, the record (valid only during the
	// call), a label of its kind and step ("put", "split_link",
	// "put_duplicate", ...) and the error apply returned: metrics and
	// tests.
	OnApply func(index uint64, rec []byte, kind string, err error)
	// OnSnapshot, when set, is called by Snapshot under the apply lock,
	// once the region's capture started: tests take the image the
	// snapshot must hold with it.
	OnSnapshot func(region *meganode.Region)
}

// New returns the Machine of c.Region, with its meganodes open.
func New(c Config) (*Machine, error) {
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Machine{id: c.Region.ID(), files: c.Files, log: log, onApply: c.OnApply, onSnapshot: c.OnSnapshot}
	m.megas.Store(&meganodeTable{})
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.adoptLocked(c.Region); err != nil {
		return nil, err
	}
	return m, nil
}

// ID is the region's ID, fixed for the machine's life.
func (m *Machine) ID() uint32 { return m.id }

// Region returns the region's file as it is now. A region record that
// pins other sizes, or a restore, replaces it: a reader that must see one
// region throughout takes it once.
func (m *Machine) Region() *meganode.Region { return m.current.Load() }

// NodeSize is the size of the region's tree nodes.
func (m *Machine) NodeSize() int { return m.nodeSize }

// MaxKey is the longest key the region's nodes take.
func (m *Machine) MaxKey() int { return m.maxKey }

// Applied is the index of the last log entry applied.
func (m *Machine) Applied() uint64 { return m.applied.Load() }

// Formatted reports whether the region record was applied.
func (m *Machine) Formatted() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.Formatted
}

// State returns a copy of the replicated state.
func (m *Machine) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.Clone()
}

// Progress returns the splits in progress, in start order, and the root
// meganode formatted and not yet published (0 if none): what a new
// leader resumes or settles.
func (m *Machine) Progress() ([]SplitProgress, blink.Ptr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	splits := make([]SplitProgress, len(m.state.Splits))
	for i, p := range m.state.Splits {
		splits[i] = p.clone()
	}
	return splits, m.state.NewRoot
}

// SplitOf returns the split in progress of meganode x, if any.
func (m *Machine) SplitOf(x blink.Ptr) (SplitProgress, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.state.SplitOf(x); p != nil {
		return p.clone(), true
	}
	return SplitProgress{}, false
}

// Targets returns the remote split targets in the region: each target
// meganode with the source meganode that began it.
func (m *Machine) Targets() map[blink.Ptr]blink.Ptr {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[blink.Ptr]blink.Ptr, len(m.targets))
	for yp, ts := range m.targets {
		out[yp] = ts.source
	}
	return out
}

// SessionDigest returns the digest of the session table that a remote
// split's commit carries (sessions.go), at most maxSize bytes.
func (m *Machine) SessionDigest(maxSize int) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.Sessions.appendDigest(nil, maxSize)
}

// Frozen returns a meganode in the frozen part of a split (0 when none):
// a source before its last free record, or a target before its commit.
// No snapshot can be taken while there is one.
func (m *Machine) Frozen() blink.Ptr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.frozenLocked()
}

// Exclusive runs f while no record applies, with the region and the
// applied index: for readers that need the region at one index (and for
// tests that damage it on purpose).
func (m *Machine) Exclusive(f func(r *meganode.Region, applied uint64)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.region, m.state.Applied)
}

// AddMeganode formats a meganode of level with bounds b in the lowest
// free slot, outside the log, and publishes it: for tests and tools that
// build a region's tree by hand. A replica changed so is no longer
// identical to its group's others.
func (m *Machine) AddMeganode(level int, b blink.Bounds) (*Meganode, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.newMeganodeLocked(level, b, func(*blink.Tree) error { return nil })
	if err != nil {
		return nil, err
	}
	return m.MeganodeAt(p), nil
}

// Clients returns the client ids the session table remembers, ascending.
func (m *Machine) Clients() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.Sessions.sortedIDs()
}

// ForgetClient forgets client id whole, as the session table forgets its
// oldest client once it holds its bound, and reports whether the table
// remembered it: a seam for tests of what a forgotten client meets. The
// change is outside the log: this replica's table no longer equals its
// group's others'.
func (m *Machine) ForgetClient(id uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := &m.state.Sessions
	s := t.clients[id]
	if s == nil {
		return false
	}
	t.unlink(s)
	delete(t.clients, id)
	t.markEvicted(id)
	return true
}

// Capture starts a copy-on-write capture of the region at its applied
// index, which it returns with it: writes wait for the start only.
func (m *Machine) Capture() (*meganode.Capture, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, 0, fmt.Errorf("rsm: region %d: %w", m.id, ErrClosed)
	}
	c, err := m.region.Capture()
	if err != nil {
		return nil, 0, fmt.Errorf("rsm: capture region %d: %w", m.id, err)
	}
	return c, m.state.Applied, nil
}

// Close closes the region and discards its file (Files.Discard): the
// replica is dropped, or the server stops (its log and snapshots hold
// the region). Requests that find the machine after it fail with
// ErrClosed (or meganode.ErrClosed).
func (m *Machine) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return m.discardLocked()
}

// Closed reports whether Close ran.
func (m *Machine) Closed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// adoptLocked makes r the region and opens its meganodes. REQUIRES: m.mu
// held.
func (m *Machine) adoptLocked(r *meganode.Region) error {
	m.region = r
	m.current.Store(r)
	m.nodeSize = int(r.Layout().NodeSize)
	m.maxKey = blink.MaxKeySize(m.nodeSize)
	m.megaMu.Lock()
	defer m.megaMu.Unlock()
	m.megas.Store(&meganodeTable{})
	for _, slot := range r.Meganodes() {
		mn, err := r.OpenMeganode(slot, m.treeOptions())
		if err != nil {
			return fmt.Errorf("rsm: open meganode in slot %d: %w", slot, err)
		}
		if err := m.addMeganodeLocked(mn); err != nil {
			return err
		}
	}
	return nil
}

// discardLocked empties the meganode table and discards the region's
// file. REQUIRES: m.mu held.
func (m *Machine) discardLocked() error {
	m.megaMu.Lock()
	m.megas.Store(&meganodeTable{})
	m.megaMu.Unlock()
	if err := m.files.Discard(m.region); err != nil {
		return fmt.Errorf("rsm: drop region %d: %w", m.id, err)
	}
	return nil
}

// remakeLocked replaces the (empty) region with an empty one of layout l:
// the region record of a log made by a server with other sizes.
// REQUIRES: m.mu held.
func (m *Machine) remakeLocked(l Layout) error {
	if err := m.discardLocked(); err != nil {
		return err
	}
	r, err := m.files.Create(m.id, l)
	if err != nil {
		return fmt.Errorf("rsm: make region %d with the sizes of its log: %w", m.id, err)
	}
	m.log.Warn("rsm: the region keeps the sizes it was made with, not this server's options",
		slog.Uint64("region", uint64(m.id)), slog.Uint64("region_size", l.Size), slog.Uint64("meganode_size", l.MeganodeSize), slog.Uint64("node_size", uint64(l.NodeSize)), slog.Bool("size_classes", l.SizeClasses))
	return m.adoptLocked(r)
}

// LayoutOf is region r's layout as a region record pins it.
func LayoutOf(r *meganode.Region) Layout {
	l := r.Layout()
	return Layout{Size: l.Size, MeganodeSize: l.MeganodeSize, NodeSize: uint32(l.NodeSize), SizeClasses: r.SizeClasses()}
}

// Versions reports the region's version mode (docs/transactions.md §2):
// whether its keys have versions, the legacy version U of entries written
// before, and the version clock.
func (m *Machine) Versions() (versioned bool, legacy, clock uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.Versioned(), m.state.Legacy, m.state.Clock
}
