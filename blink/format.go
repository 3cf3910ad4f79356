package blink

// This file fixes the byte layout of the two kinds of fixed-size node that a
// meganode is made of. The constants below are part of Cell's memory format
// AND of its wire format: one-sided readers on other machines decode these
// bytes, so a change here is a format change (pinned by the golden tests in
// testdata/).
//
// All integers are little-endian. A node is NodeSize bytes (a power of two
// from 512 to 8192), 8-byte aligned inside its region, and starts and ends
// with a version word (docs/design.md §3).
//
// Tree node (kind 1):
//
//	 0       8      10     12     14     16     18     20     22   24          32
//	 +-------+--+--+------+------+------+------+------+------+----+-----------+
//	 | head  |fl|lv| count|minOff|minLen|maxOff|maxLen| heap |kind| rightLink |
//	 |version|  |  |      |      |      |      |      |  lo  |rsv | (Ptr)     |
//	 +-------+--+--+------+------+------+------+------+------+----+-----------+
//	 32: slot array, count × u16 entry offsets, sorted by entry key ->
//	     ... free space ...
//	 heapLo: <- heap, growing down: entries, min key bytes, max key bytes
//	 NodeSize-8: tail version
//
//	 fl (flags, byte 8):  bit0 valid, bit1 min is -inf, bit2 max is +inf,
//	                      bit3 entries point to extents (leaf of a leaf meganode),
//	                      bit4 versioned: entries carry an entry word (only
//	                      with bit3; a legacy extent leaf has it clear)
//	 lv (byte 9):         local level, 0 = leaf
//	 kind (byte 22):      1 tree node, 2 meganode header, 0 never used / free
//
//	 entry at offset o:   [keyLen u16][key][payload]
//	   extent payload:    [extent Ptr u64][record length u32][record CRC64 u64]  (20 bytes)
//	   versioned payload: [extent payload (20 bytes)][entry word u64]            (28 bytes)
//	   pointer payload:   [child Ptr u64]                                         (8 bytes)
//
//	 entry word (word.go): bits 0..61 version, bit 62 locked, bit 63
//	 placeholder. A placeholder's extent payload is zero (no record).
//	 Entries are not 8-byte aligned: the word is read from a validated copy.
//
// Invariant: keys of entries are strictly increasing in slot order, and every
// entry key k satisfies min <= k < max. In an inner node, entry i's child
// covers [key_i, key_{i+1}) (the last one up to the node's max), and entry 0's
// key equals the node's min key (min -inf is stored as the empty key with the
// flag set).
//
// Meganode header (kind 2), node 0 of every meganode:
//
//	 0  head version u64
//	 8  flags u8 (valid, min -inf, max +inf)   9 rsv u8
//	10  global level u16 (0 = leaf meganode)   12 magic u32 "CELM"
//	16  local height u16                        18 node size log2 u16
//	20  reserved u16                            22 kind u8 (= 2)   23 rsv u8
//	24  local root Ptr u64                      (loaded alone, atomically, by local readers)
//	32  node capacity u32                       (nodes in the meganode, header included)
//	36  next fresh node index u32
//	40  free node count u32                     44 reserved u32
//	48  free list head Ptr u64                  (freed nodes link through their right link)
//	56  meganode size u64
//	64  min key length u16                      66 max key length u16
//	68  reserved u32
//	72  min key bytes (≤ MaxKeySize)            72+MaxKeySize: max key bytes
//	NodeSize-16: legacy version U u64           (versioned mode; 0 in legacy mode)
//	NodeSize-8: tail version
//
//	 header flags also use bit4 (versioned): the meganode is in versioned
//	 mode, with legacy version U; clear (and U zero) in legacy mode, which
//	 every header written before versions reads as.
//
// Extent record (in the region's extent area), see extent.go:
//
//	[keyLen u32][valLen u32][key][value]
//
// with its length and CRC-64 (ECMA) kept in the leaf entry that points to it.

// Offsets common to every node.
const (
	offHeadVersion = 0
	offFlags       = 8
	offLevel       = 9
	offCount       = 10
	offMinOff      = 12
	offMinLen      = 14
	offMaxOff      = 16
	offMaxLen      = 18
	offHeapLo      = 20
	offKind        = 22
	offRightLink   = 24
	offSlots       = 32 // first slot; also the size of the fixed header

	tailSize = 8 // the tail version word
)

// Node flags (byte offFlags).
const (
	flagValid   = 1 << 0
	flagMinInf  = 1 << 1
	flagMaxInf  = 1 << 2
	flagExtents = 1 << 3
	// flagVersioned marks a versioned extent leaf (entries carry an entry
	// word) and, in a meganode header, a meganode in versioned mode.
	flagVersioned = 1 << 4
)

// Node kinds (byte offKind).
const (
	kindFree   = 0
	kindTree   = 1
	kindHeader = 2
)

// Entry layout.
const (
	slotSize         = 2
	keyLenSize       = 2
	extentPayload    = 20 // ptr u64, length u32, crc u64
	versionedPayload = 28 // extent payload, then the entry word u64
	pointerPayload   = 8  // child ptr u64
)

// Meganode header offsets.
const (
	hdrGlobalLevel = 10
	hdrMagic       = 12
	hdrHeight      = 16
	hdrNodeLog2    = 18
	hdrRoot        = 24
	hdrCapacity    = 32
	hdrNextFresh   = 36
	hdrFreeCount   = 40
	hdrFreeHead    = 48
	hdrSize        = 56
	hdrMinLen      = 64
	hdrMaxLen      = 66
	hdrKeys        = 72

	headerMagic = 0x4d4c4543 // "CELM" little-endian

	// hdrLegacyFromEnd: the legacy version U, a u64, sits this many bytes
	// before the end of the header node (just before the tail version).
	hdrLegacyFromEnd = 16
)

// Size limits.
const (
	MinNodeSize     = 512
	MaxNodeSize     = 8192
	DefaultNodeSize = 1024
)

// MaxKeySize returns the largest key a tree with the given node size accepts:
// nodeSize/8 (128 bytes with 1 KiB nodes). It guarantees that a node holding
// a min key, a max key and one more entry than fit always splits into two
// halves that fit.
func MaxKeySize(nodeSize int) int { return nodeSize / 8 }
