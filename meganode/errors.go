package meganode

import "errors"

// Errors returned by this package. They are usually wrapped with context:
// test with errors.Is.
//
// Extents.Alloc reports a full extent area with an error wrapping
// blink.ErrExtentsFull, as the blink.Extents contract requires.
var (
	// ErrCorruption marks region bytes that cannot be what a correct writer
	// wrote: a bad header, a control byte or free list that breaks the
	// allocator's invariants. It is wrapped with context, never a new error
	// per case.
	ErrCorruption = errors.New("meganode: corruption")
	// ErrInvalidOptions: an Options field is out of range, or the fields do
	// not describe a layout that fits.
	ErrInvalidOptions = errors.New("meganode: invalid options")
	// ErrNoHugepages: mode HugepagesOn was asked for, but there is no
	// usable hugetlbfs mount with enough free huge pages.
	ErrNoHugepages = errors.New("meganode: no huge pages available")
	// ErrUnsupported: regions cannot be mapped on this platform.
	ErrUnsupported = errors.New("meganode: not supported on this platform")
	// ErrLocked: another process (or another Region in this one) holds the
	// region file open for writing.
	ErrLocked = errors.New("meganode: region file in use")
	// ErrClosed: the region was closed.
	ErrClosed = errors.New("meganode: region closed")
	// ErrRegionFull: every meganode slot of the region is in use.
	ErrRegionFull = errors.New("meganode: no free meganode slot")
	// ErrNoMeganode: the slot is out of range or holds no meganode.
	ErrNoMeganode = errors.New("meganode: no meganode in slot")
	// ErrInvalidSize: an extent allocation of zero or negative size.
	ErrInvalidSize = errors.New("meganode: invalid extent size")
	// ErrBadFree: Free of a block that is not allocated, or with a size
	// that does not match the block (double free, wild pointer). The free
	// is ignored: leaking a block is safer than corrupting the free lists.
	ErrBadFree = errors.New("meganode: bad extent free")
	// ErrImageMismatch: RestoreImage was given an image of another region
	// (ID) or of another layout than its options ask for. The image may be
	// sound; it is not the one wanted.
	ErrImageMismatch = errors.New("meganode: image does not match the options")
)
