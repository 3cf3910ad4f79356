package meganode

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/cellstore/cell/blink"
)

// HugepageMode selects how hard Create tries to back a region with huge
// pages.
type HugepageMode uint8

const (
	// HugepagesAuto uses a hugetlbfs mount when one has enough free huge
	// pages, else a file in ShmDir (tmpfs) advised MADV_HUGEPAGE, else a
	// plain file in Dir. The default.
	HugepagesAuto HugepageMode = iota
	// HugepagesOn requires a hugetlbfs mount with enough free huge pages
	// and fails with ErrNoHugepages otherwise.
	HugepagesOn
	// HugepagesOff uses a plain file in Dir (a test directory, or a disk
	// file when memory is short).
	HugepagesOff
)

var hugepageModeNames = [...]string{"auto", "on", "off"}

func (m HugepageMode) String() string {
	if int(m) < len(hugepageModeNames) {
		return hugepageModeNames[m]
	}
	return fmt.Sprintf("HugepageMode(%d)", uint8(m))
}

// ParseHugepageMode parses "auto", "on" or "off" (flag and config values).
func ParseHugepageMode(s string) (HugepageMode, error) {
	for i, n := range hugepageModeNames {
		if strings.EqualFold(s, n) {
			return HugepageMode(i), nil
		}
	}
	return 0, fmt.Errorf("meganode: hugepage mode %q is not auto, on or off: %w", s, ErrInvalidOptions)
}

// Backing is the kind of memory a region file lives in.
type Backing uint8

const (
	// BackingFile is a plain file in Options.Dir (page cache pages).
	BackingFile Backing = iota + 1
	// BackingShm is a file in a tmpfs (/dev/shm), advised MADV_HUGEPAGE so
	// that transparent huge pages back it where the kernel allows it
	// (/sys/kernel/mm/transparent_hugepage/shmem_enabled).
	BackingShm
	// BackingHugetlbfs is a file in a hugetlbfs mount: reserved huge pages.
	BackingHugetlbfs
)

func (b Backing) String() string {
	switch b {
	case BackingFile:
		return "file"
	case BackingShm:
		return "shm"
	case BackingHugetlbfs:
		return "hugetlbfs"
	}
	return fmt.Sprintf("Backing(%d)", uint8(b))
}

// Options configure a new region. The zero value of every field means its
// default. The layout fields (Size, MeganodeSize, NodeSize, Meganodes,
// NodeFraction, AtomSize) are written into the region header: replicas of a
// region must use the same values, whatever backing each host picks, so that
// they allocate the same offsets.
type Options struct {
	// ID is the region's cluster-unique ID, 0..blink.MaxRegionID (24 bits).
	// Default 0.
	ID uint32
	// Size is the region size in bytes, rounded up to a multiple of 4 KiB,
	// at most 1 TiB (pointer offsets have 40 bits). Default 1 GiB. On
	// hugetlbfs the file and the mapping are further rounded up to the huge
	// page size; the layout (and Region.Bytes) uses Size only.
	Size uint64
	// MeganodeSize is the size of one meganode in bytes, a multiple of
	// NodeSize holding at least 8 nodes. Default 64 MiB.
	MeganodeSize uint64
	// NodeSize is the size of every B-link node, a power of two from 512 to
	// 8192. Default 1024.
	NodeSize int
	// Meganodes is the number of meganode slots in the node area. Default
	// 0: derived from NodeFraction.
	Meganodes int
	// NodeFraction is the fraction of Size given to the node area when
	// Meganodes is 0: floor(Size*NodeFraction/MeganodeSize) slots, at least
	// one. Default 0.25, which leaves three quarters of the region to
	// extents: a leaf meganode of 1 KiB nodes with short keys indexes about
	// a million records, whose extents take two to three times its size.
	NodeFraction float64
	// AtomSize is the smallest extent block, a power of two from 16 to
	// 4096 bytes (a free block holds two 8-byte list links). The allocator
	// keeps one control byte per atom. Default 64.
	AtomSize int
	// SizeClasses serves small extents from slots of size-class slabs
	// instead of power-of-two buddy blocks (slab.go): less memory per
	// record. It is part of the region's format (version 3) and of its
	// layout's identity: replicas of a region must agree on it. Default
	// false: buddy blocks only, the format before size classes. Create
	// only: Open and RestoreImage take it from the region's header.
	SizeClasses bool
	// Hugepages selects the backing: HugepagesAuto (default), HugepagesOn
	// or HugepagesOff.
	Hugepages HugepageMode
	// Dir is the directory of plain-file backed regions. Default
	// os.TempDir().
	Dir string
	// ShmDir is the tmpfs directory tried by HugepagesAuto. Default
	// "/dev/shm".
	ShmDir string
	// HugetlbfsDir is the hugetlbfs mount to use. Default: the first
	// hugetlbfs mount in /proc/mounts with enough free huge pages.
	HugetlbfsDir string
	// Name is the region file's name inside the chosen directory. Default
	// "cell-region-%06x" with the region ID. Processes sharing a host (say
	// replicas in a test cluster) must use distinct names. Create never
	// overwrites an existing file.
	Name string
	// Prefault commits the region file's memory when it is created
	// (fallocate on tmpfs and plain files), so that a host short of memory
	// or disk fails Create instead of a later write faulting with SIGBUS.
	// Default false: the region takes memory as its pages are first
	// written, not Size up front, and Create only warns when the file
	// system has less room than Size. A hugetlbfs region's huge pages are
	// reserved at mmap either way (they were set aside for huge pages
	// already).
	Prefault bool
	// FileGroup, if positive, is the group ID that region files are
	// given, with mode 0640: other users of the group (clients reading
	// one-sided over shared memory) can map them read-only. The process
	// must be allowed to give files to the group (a member of it, or
	// root). Default 0: mode 0600, the server's user only.
	FileGroup int
	// Logger receives one Info record per region created or opened (with
	// the backing used) and fallback explanations. Default slog.Default().
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultRegionSize   = 1 << 30
	DefaultMeganodeSize = 64 << 20
	DefaultNodeFraction = 0.25
	DefaultAtomSize     = 64
	DefaultShmDir       = "/dev/shm"

	// MinAtomSize and MaxAtomSize bound Options.AtomSize.
	MinAtomSize = 16
	MaxAtomSize = 4096
	// MaxRegionSize is the largest region: offsets in a blink.Ptr have 40
	// bits.
	MaxRegionSize = blink.MaxOffset + 1
)

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Size == 0 {
		o.Size = DefaultRegionSize
	}
	if o.Size <= MaxRegionSize {
		o.Size = alignUp(o.Size, pageAlign)
	}
	if o.MeganodeSize == 0 {
		o.MeganodeSize = DefaultMeganodeSize
	}
	if o.NodeSize == 0 {
		o.NodeSize = blink.DefaultNodeSize
	}
	if o.NodeFraction == 0 {
		o.NodeFraction = DefaultNodeFraction
	}
	if o.AtomSize == 0 {
		o.AtomSize = DefaultAtomSize
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.ShmDir == "" {
		o.ShmDir = DefaultShmDir
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("cell-region-%06x", o.ID)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports whether the options describe a usable region. Errors
// wrap ErrInvalidOptions.
func (o *Options) Validate() error {
	if o.ID > blink.MaxRegionID {
		return fmt.Errorf("meganode: region ID %d exceeds %d: %w", o.ID, blink.MaxRegionID, ErrInvalidOptions)
	}
	if o.Hugepages > HugepagesOff {
		return fmt.Errorf("meganode: %v: %w", o.Hugepages, ErrInvalidOptions)
	}
	if o.Meganodes < 0 {
		return fmt.Errorf("meganode: %d meganode slots: %w", o.Meganodes, ErrInvalidOptions)
	}
	if !(o.NodeFraction > 0 && o.NodeFraction < 1) {
		return fmt.Errorf("meganode: node fraction %v not in (0, 1): %w", o.NodeFraction, ErrInvalidOptions)
	}
	if o.Name == "" || o.Name == "." || o.Name == ".." || strings.ContainsRune(o.Name, filepath.Separator) || strings.ContainsRune(o.Name, '/') {
		return fmt.Errorf("meganode: region file name %q is not a plain file name: %w", o.Name, ErrInvalidOptions)
	}
	if o.FileGroup < 0 {
		return fmt.Errorf("meganode: file group %d: %w", o.FileGroup, ErrInvalidOptions)
	}
	l, err := o.layout()
	if err != nil {
		return err
	}
	if o.SizeClasses {
		return checkSizeClasses(l)
	}
	return nil
}

// slots returns the number of meganode slots the options ask for.
func (o *Options) slots() uint64 {
	if o.Meganodes > 0 {
		return uint64(o.Meganodes)
	}
	if o.MeganodeSize == 0 {
		return 0
	}
	n := uint64(float64(o.Size) * o.NodeFraction / float64(o.MeganodeSize))
	return max(n, 1)
}

// layout computes the region layout. Errors wrap ErrInvalidOptions.
func (o *Options) layout() (Layout, error) {
	l, err := computeLayout(o.Size, o.MeganodeSize, uint64(o.NodeSize), uint64(o.AtomSize), o.slots())
	if err != nil {
		return Layout{}, fmt.Errorf("%w: %w", err, ErrInvalidOptions)
	}
	return l, nil
}

// OpenOptions configure Open.
type OpenOptions struct {
	// Logger receives one Info record for the opened region. Default
	// slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields with their defaults.
func (o *OpenOptions) EnsureDefaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}
