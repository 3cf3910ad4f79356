package meganode

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/internal/atomicmem"
)

// mapping is a region file mapped MAP_SHARED, read-write. The platform
// files (mmap_linux.go, mmap_other.go) create, open and unmap it.
type mapping struct {
	path         string
	backing      Backing
	hugePageSize uint64   // the huge page size on hugetlbfs, else 0
	file         *os.File // held open (and flock'ed) until close
	data         []byte   // the whole mapping, possibly longer than the region

	// scans counts the WriteImage calls running, which turn read-ahead
	// off on a plain file's mapping (adviseScan).
	scans struct {
		sync.Mutex
		n int
	}
}

// Region is one region: a file of whole meganodes and an extent area,
// mapped into memory (see format.go for the layout).
//
// A Region is safe for concurrent use. Close unmaps the memory: the caller
// must have stopped every use of the region's meganode trees, extents and
// Bytes first (they would fault, not fail).
type Region struct {
	log *slog.Logger
	m   *mapping // nil for a region over heap memory (tests)
	mem []byte   // the region, Layout.Size bytes of the mapping
	lay Layout
	id  uint32
	ext *Extents

	// openCaptures are the open copy-on-write images (capture.go), nil
	// when none; changed under mu, read by writers.
	openCaptures atomic.Pointer[[]*Capture]
	// testBeforeWrite, set by tests only, is called by beforeWrite.
	testBeforeWrite func(off, n uint64)
	// unmapped is set by Close before it unmaps the region: the header
	// word accessors (Root, Applied and their setters) take no lock, and
	// read 0 and store nothing once it is set instead of touching an
	// unmapped page.
	unmapped atomic.Bool

	// Locking notes: Region.mu < Extents.mu < blink.Tree's lock, and
	// Region.mu < Capture.mu; beforeWrite takes Capture.mu under any of
	// them.
	mu struct {
		sync.Mutex
		closed bool
		// open holds the meganodes handed out, by slot, so that one
		// meganode never gets two trees (two writers) in one process.
		open map[int]*Meganode
	}
}

// Create creates the file of a new region as opts describe (backing chosen
// by opts.Hugepages), maps it and formats it: an empty region with all
// meganode slots free and one free extent area. It never overwrites an
// existing file (the error then wraps fs.ErrExist). The file is sparse: it
// takes memory as its pages are first written. With opts.Prefault its
// memory is committed up front where the file system allows (fallocate),
// so that a short host fails Create rather than a later write with SIGBUS.
func Create(opts Options) (*Region, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	l, err := opts.layout()
	if err != nil {
		return nil, err
	}
	m, err := createMapping(&opts, l.Size)
	if err != nil {
		return nil, err
	}
	mem := m.data[:l.Size:l.Size]
	h := header{Layout: l, ID: opts.ID}
	if opts.SizeClasses {
		h.flags = flagSizeClasses
	}
	r := newRegion(opts.Logger, m, mem, h, formatImage(mem, h))
	r.log.Info("meganode: region created", r.logAttrs()...)
	return r, nil
}

// Open maps the existing region file at path and validates it: the header
// (an error wrapping ErrCorruption when it is not a region this version
// wrote), and every control byte and free list of the extent area. The
// backing is recognised from the file system the file lives in. The region
// file is locked (flock) while open: a second Open of the same file fails
// with ErrLocked.
func Open(path string, opts OpenOptions) (*Region, error) {
	opts.EnsureDefaults()
	m, err := openMapping(path)
	if err != nil {
		return nil, err
	}
	h, ext, err := openImage(m.data)
	if err != nil {
		_ = m.close()
		return nil, fmt.Errorf("meganode: open region %s: %w", path, err)
	}
	r := newRegion(opts.Logger, m, m.data[:h.Size:h.Size], h, ext)
	r.log.Info("meganode: region opened", r.logAttrs()...)
	return r, nil
}

func newRegion(log *slog.Logger, m *mapping, mem []byte, h header, ext *Extents) *Region {
	r := &Region{log: log, m: m, mem: mem, lay: h.Layout, id: h.ID, ext: ext}
	r.mu.open = make(map[int]*Meganode)
	ext.beforeWrite = r.beforeWrite
	return r
}

// formatImage writes an empty region into mem (Size bytes, 8-byte aligned):
// the header page and the extent area. The node area is left alone; each
// meganode is formatted when its slot is taken.
func formatImage(mem []byte, h header) *Extents {
	atomicmem.Store(mem[:headerSize], atomicmem.Alloc(headerSize))
	e := formatExtentsWith(mem, h.Layout, h.sizeClasses())
	if e.sc != nil {
		h.slabDir = e.sc.dir
	}
	h.store(mem)
	return e
}

// openImage validates the region image in mem (a mapping at least as long
// as the region) and returns its header and allocator. Errors wrap
// ErrCorruption.
func openImage(mem []byte) (header, *Extents, error) {
	h, err := decodeHeader(mem)
	if err != nil {
		return header{}, nil, err
	}
	if uint64(len(mem)) < h.Size {
		return header{}, nil, fmt.Errorf("meganode: region of %d bytes in a %d-byte image: %w", h.Size, len(mem), ErrCorruption)
	}
	ext, err := openExtentsWith(mem[:h.Size:h.Size], h)
	if err != nil {
		return header{}, nil, err
	}
	return h, ext, nil
}

func (r *Region) logAttrs() []any {
	return []any{
		slog.Uint64("region", uint64(r.id)),
		slog.String("path", r.Path()),
		slog.String("backing", r.Backing().String()),
		slog.Uint64("size", r.lay.Size),
		slog.Uint64("meganodes", r.lay.Slots),
		slog.Uint64("meganode_size", r.lay.MeganodeSize),
		slog.Uint64("extent_heap", r.lay.Atoms*r.lay.AtomSize),
		slog.Bool("size_classes", r.SizeClasses()),
	}
}

// ID returns the region's 24-bit ID.
func (r *Region) ID() uint32 { return r.id }

// Path returns the region file's path ("" for a region not backed by a
// file). A same-host reader may map it read-only.
func (r *Region) Path() string {
	if r.m == nil {
		return ""
	}
	return r.m.path
}

// Backing returns the kind of memory the region file lives in (0 for a
// region not backed by a file).
func (r *Region) Backing() Backing {
	if r.m == nil {
		return 0
	}
	return r.m.backing
}

// HugePageSize returns the huge page size of a hugetlbfs-backed region, and
// 0 for other backings.
func (r *Region) HugePageSize() uint64 {
	if r.m == nil {
		return 0
	}
	return r.m.hugePageSize
}

// Bytes returns the region's memory, Layout().Size bytes, 8-byte aligned.
// It is shared with blink trees and the allocator: read it with 8-byte
// atomic loads, never write it (every write goes through the region's
// trees, extents and setters, which copy-on-write images rely on:
// capture.go). It is unmapped by Close.
func (r *Region) Bytes() []byte { return r.mem }

// Layout returns where the header, node area and extent area are.
func (r *Region) Layout() Layout { return r.lay }

// SizeClasses reports whether the region serves small extents from
// size-class slabs (region format 3, Options.SizeClasses) rather than
// buddy blocks only.
func (r *Region) SizeClasses() bool { return r.ext.SizeClasses() }

// Extents returns the region's extent allocator, shared by its meganodes.
func (r *Region) Extents() *Extents { return r.ext }

// Root returns the root meganode pointer stored at offset 0
// (docs/design.md §4: meaningful in the region that holds the root
// meganode), 0 once the region is closed. Safe for concurrent use, but not with Close.
func (r *Region) Root() blink.Ptr {
	return blink.Ptr(r.loadWord(offRoot))
}

// SetRoot stores the root meganode pointer at offset 0, atomically;
// nothing once the region is closed. Not concurrent with Close.
func (r *Region) SetRoot(p blink.Ptr) {
	r.storeWord(offRoot, uint64(p))
}

// Applied returns the applied index stored in the header: the raft log
// index of the last record applied to the region (0 before the first,
// and once the region is closed). Safe for concurrent use, but not with
// Close.
func (r *Region) Applied() uint64 {
	return r.loadWord(offApplied)
}

// SetApplied stores the applied index in the header, atomically, so that
// the region's image says at which log index it was taken; nothing once
// the region is closed. Called by the region's one writer (an apply
// path), not concurrently with Close.
func (r *Region) SetApplied(index uint64) {
	r.storeWord(offApplied, index)
}

// loadWord loads the header word at off; 0 once the region is closed.
func (r *Region) loadWord(off int) uint64 {
	if r.unmapped.Load() {
		return 0
	}
	return atomicmem.LoadUint64(r.mem, off)
}

// storeWord stores the header word at off, told to open captures first;
// nothing once the region is closed (its writer's later stores are lost
// with the region, as the trees' and extents' fail with ErrClosed).
func (r *Region) storeWord(off int, v uint64) {
	if r.unmapped.Load() {
		return
	}
	r.beforeWrite(uint64(off), 8)
	atomicmem.StoreUint64(r.mem, off, v)
}

// Sync flushes the mapping to its file (msync). Memory-backed files
// (hugetlbfs, tmpfs) have nothing to flush; a plain file is then durable
// up to the moment Sync was called.
func (r *Region) Sync() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return ErrClosed
	}
	if r.m == nil {
		return nil
	}
	return r.m.sync()
}

// Check validates the header and walks the extent area (Extents.Check).
// Errors wrap ErrCorruption.
func (r *Region) Check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return ErrClosed
	}
	hdr := atomicmem.Alloc(headerSize)
	atomicmem.Load(hdr, r.mem[:headerSize])
	h, err := decodeHeader(hdr)
	if err != nil {
		return err
	}
	if h.Layout != r.lay || h.ID != r.id || h.sizeClasses() != r.ext.SizeClasses() {
		return fmt.Errorf("meganode: region header changed under the open region: %w", ErrCorruption)
	}
	return r.ext.Check()
}

// Close unmaps the region and releases its file; later calls on the region
// (and its extents) return ErrClosed. An open capture is closed: its
// WriteTo, running or not, fails with ErrClosed. REQUIRES: no meganode
// tree, extent or Bytes of the region is in use, and no WriteImage runs.
// Closing twice is a no-op.
func (r *Region) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return nil
	}
	for _, c := range r.captures() {
		c.endLocked()
	}
	r.mu.closed = true
	r.unmapped.Store(true)
	r.mu.open = nil
	r.ext.close()
	if r.m == nil {
		return nil
	}
	if err := r.m.close(); err != nil {
		return fmt.Errorf("meganode: close region %s: %w", r.m.path, err)
	}
	return nil
}

// Remove deletes the region's file. An open mapping stays valid until
// Close; removing an already removed file is not an error.
func (r *Region) Remove() error {
	if r.m == nil {
		return nil
	}
	if err := os.Remove(r.m.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("meganode: remove region file: %w", err)
	}
	return nil
}

// String identifies the region in logs.
func (r *Region) String() string {
	return fmt.Sprintf("region %d (%s, %s)", r.id, r.Backing(), r.Path())
}
