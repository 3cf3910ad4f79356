package blink

import "fmt"

// Ptr is a 64-bit pointer into Cell's memory: regionID<<40 | byte offset.
// Zero is nil. Pointers never hold host addresses, so a region can move to
// another server by changing only the region table.
type Ptr uint64

const (
	offsetBits = 40
	offsetMask = 1<<offsetBits - 1

	// MaxRegionID is the largest region ID (24 bits).
	MaxRegionID = 1<<24 - 1
	// MaxOffset is the largest byte offset inside a region (1 TiB - 1).
	MaxOffset = offsetMask
)

// MakePtr returns the pointer to byte offset off of region r.
// It panics if r or off do not fit: callers check sizes at region creation.
func MakePtr(region uint32, off uint64) Ptr {
	if region > MaxRegionID || off > MaxOffset {
		panic(fmt.Sprintf("blink: pointer out of range: region %d offset %d", region, off))
	}
	return Ptr(uint64(region)<<offsetBits | off)
}

// Region returns the region ID of p.
func (p Ptr) Region() uint32 { return uint32(uint64(p) >> offsetBits) }

// Offset returns the byte offset of p inside its region.
func (p Ptr) Offset() uint64 { return uint64(p) & offsetMask }

// IsNil reports whether p is the nil pointer.
func (p Ptr) IsNil() bool { return p == 0 }

// String formats p as region:offset (hex offset), or "nil".
func (p Ptr) String() string {
	if p == 0 {
		return "nil"
	}
	return fmt.Sprintf("%d:%#x", p.Region(), p.Offset())
}
