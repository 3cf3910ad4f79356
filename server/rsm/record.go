package rsm

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"

	"github.com/cellstore/cell/blink"
)

// A write record, little-endian at fixed offsets (a format that log
// entries will keep):
//
//	0  version u8 (1)        1 kind u8                   2 flags u16 (bit0 retry, bit1 floor)
//	4  key length u32
//	8  meganode Ptr u64      the header of the meganode to change
//	16 client id u64         24 sequence u64   (at-most-once application,
//	                                            docs/design.md §9; 0 = none)
//	32 value length u32      36 reserved u32 (0)
//	40 key, then value
//
// Kinds:
//
//	1 put     a key and its value, into a leaf meganode
//	2 delete  a key (no value), from a leaf meganode
//	3 child   key and an 8-byte child meganode Ptr as the value: the
//	          separator of a meganode split, inserted into the parent (an
//	          inner meganode) as a decoupled insert
//	4 split   one step of a meganode split (split.go; the server's split driver proposes them): the meganode is the
//	          one being split (X), the key the split key (sep), the value a
//	          split body:
//
//	  0  phase u8  1 reserved [7]u8 (0)
//	  8  new meganode Ptr u64    Y, the right half's meganode: 0 in a
//	                             local start record and in a root record
//	                             (apply chooses the slot; the result names
//	                             it), Y in another region in a remote
//	                             split's start
//	  16 batch u32               copy: leaves per batch; free: nodes
//	  20 reserved u32 (0)
//	  24 cursor                  copy: the key to copy from; link of a
//	                             remote split: Y's local root (8 bytes);
//	                             root: the new root's entries, each
//	                             [key length u32][key][child Ptr u64];
//	                             else empty
//
// Split phases, in log order: start (freeze X at sep, format Y with bounds
// [sep, X.max) at X's level, taking X's right link), copy* (one batch of
// X's frozen leaf entries into Y, records shared), link (X's boundary right
// links to Y's root, X.max = sep: the point of no return), free* (one batch
// of the old right half invalidated and freed; the last thaws X and Y),
// then the separator as a child record into the parent, or root (a new
// root meganode over X's level) when X was the root, and end. abort undoes
// a split before its link: X thawed, Y (or an unpublished new root) freed.
// So the log says, for recovery, whether an interrupted split must be
// undone (no link record: drop Y, thaw X) or finished (link without end:
// free what is left of X's right half, insert the separator).
//
// A remote split (Y in another server's region) writes the same source
// records without copy records (X's entries are read, not written, here);
// start names Y in the other region, link carries Y's root. The target
// server logs its side as target records:
//
//	5 target  one step of the target's part in a remote split: the
//	          meganode is Y, the key the split key (begin) or empty, the
//	          value a target body:
//
//	  0  phase u8 (1 begin, 2 append, 3 commit, 4 abort)
//	  1  flags u8: bit0 max +inf
//	  2  level u16                Y's global level (begin)
//	  4  reserved u32 (0)
//	  8  right Ptr u64            Y's right link (begin)
//	                              commit: the source's version clock
//	                              (0 from a region without versions)
//	  16 source Ptr u64           X, for the operator (begin)
//	  24 begin: Y's max key; append: the entries (below); commit: the
//	     source region's session digest (sessions.go), or empty
//
// A target append's entries, X's entries in key order:
//
//	0  flags u8 (bit0 inner: children, no values; bit1 words)   1 reserved [3]u8 (0)
//	4  count u32
//	8  each entry: [key length u32][key], then an inner entry's
//	   [child Ptr u64] or a leaf entry's [value length u32][value], and
//	   with words its entry word [u64] (blink.Word: version and flags)
//
// A versioned region's leaf entries carry their words, so that a key
// keeps its version when it moves (docs/transactions.md §2.3); the
// target commit's clock raises the target's version clock to the
// source's.
//
// begin formats Y, frozen, with bounds [sep, max) in the lowest free slot
// (the record's meganode is 0: apply chooses, the result names Y); append
// adds a batch of X's entries (new records for values);
// commit thaws Y after X freed its old right half; abort drops Y.
//
//	6 region  the first record of every region's log: the meganode is 0,
//	          the key empty, the value the region's layout, pinned for
//	          the region's life (the sizes that decide a write's outcome
//	          come from here, never from a server's flags):
//
//	  0  region size u64   8 meganode size u64   16 node size u32
//	  20 flags u32: bit 0 size-class extents (meganode.Options.SizeClasses,
//	     region format 3); other bits 0. A region record with flags 0
//	     (every log before size classes) makes a buddy-only region, as
//	     before; a server that predates the flag refuses one with bit 0
//	     as a bad record.
//
//	8 cond    a conditional put or delete (docs/transactions.md §3): the
//	          header as a put's (key; client id and sequence, at most
//	          once), the value a cond body:
//
//	  0  op u8 (1 put, 2 delete)   1 target u8 (1 version, 2 value,
//	     3 present, 4 absent)      2 compare u8 (1 =, 2 !=, 3 <, 4 >;
//	     0 for present and absent) 3 reserved u8 (0)
//	  4  expected value length u32 8 expected version u64
//	  16 expected value, then (put) the new value
//
//	12 txn    a single-region transaction (docs/transactions.md §4.9):
//	          the meganode the leaf meganode of the transaction's least
//	          key (every other key is found from it by right links, in
//	          this region), the key empty, client id and sequence as a
//	          put's (at most once), the value a txn body:
//
//	  0  flags u16 (0; bit0 is kept for the If form)   2 reserved u16 (0)
//	  4  read count u32   8 range count u32   12 write count u32
//	  16 reads:  each [key length u32][key][version u64 (0: read as absent)]
//	     ranges: each [start length u32][start][end length u32][end (empty:
//	             +inf)][limit u32 (0: none)][count u32][hash u64 (blink.RangeHash)]
//	     writes: each [op u8 (1 put, 2 delete)][key length u32][key]
//	             [value length u32][value (empty for a delete)]
//
//	          Counts are bounded as wire's (MaxTxnReads, MaxTxnRanges,
//	          MaxTxnWrites); keys are not empty. Apply commits when every
//	          read key's version is the one read and every range's first
//	          limit pairs in [start, end) have the count and hash read,
//	          writing every write with one version; otherwise it changes
//	          nothing and answers the cause (version, phantom).
//
//	13 version  the region's keys get versions from here on
//	          (docs/transactions.md §2.6): the meganode 0, the key and the
//	          value empty. It sets the version clock and the legacy version
//	          U to its index and switches every tree to versioned leaves;
//	          a second one changes nothing. Kinds 9–11 are reserved for the
//	          transaction records of docs/transactions.md.
//
//	7 root    a root meganode made outside a split: the key empty, the
//	          value a root body:
//
//	  0  phase u8 (1 format, 2 publish, 3 drop)   1 reserved [7]u8 (0)
//
// format makes a leaf meganode covering the whole key space in the lowest
// free slot and remembers it as the unpublished root (the meganode field
// is 0; the result names the new meganode); publish stores the meganode
// field as the root pointer at offset 0 of the region once the region
// table took it, and forgets the unpublished root; drop frees the
// unpublished root the table refused. A split's root record (phase root)
// makes the unpublished root the same way, and publish ends it too.
//
// Put and delete records carry the client's id and the write's sequence
// number (0 and 0 for writes of the server's own): a pair applied before
// is not applied again (the session table, sessions.go). One flagged retry
// (FlagRetry: the client sent it again after losing the first attempt's
// answer) is applied only if the table vouches that the first attempt was
// not; otherwise it fails with ErrUnverifiable and changes nothing. Any
// other write of a client is a first attempt (FlagFloor): it fails the same
// way when its sequence is at or below the client's floor, since the
// table no longer remembers whether another attempt of it applied (a
// first attempt still queued when its connection broke, arriving after
// the client's window passed it, must not apply after its retry did).
// With FlagForgotten too (set beside FlagFloor since the evicted filter has levels),
// a first attempt of a client the table forgot whole (no session, in the
// evicted filter) fails the same way: the table no longer knows any of
// its sequences, and the client starts over with a new id. Records of an
// older log without these flags apply as then. A
// target commit record's value may carry, after the target body, the
// source region's session digest (sessions.go), merged into this region's
// table.
const (
	recVersion       = 1
	RecordHeaderSize = 40

	KindPut    = 1
	KindDelete = 2
	KindChild  = 3
	KindSplit  = 4
	KindTarget = 5
	KindRegion = 6
	KindRoot   = 7
	KindCond   = 8
	KindTxn    = 12
	// KindVersion is 13, after the numbers docs/transactions.md §4.13
	// keeps for the conditional and transaction records.
	KindVersion = 13

	splitBodySize  = 24
	targetBodySize = 24
	regionBodySize = 24
	rootBodySize   = 8

	// Record flags, on put and delete records with a client id: FlagRetry
	// alone, or FlagFloor with or without FlagForgotten.
	FlagRetry     = 1 << 0 // a retry after an unknown outcome
	FlagFloor     = 1 << 1 // a first attempt, refused at or below the client's floor
	FlagForgotten = 1 << 2 // with FlagFloor: refused too if the table forgot the client
)

// RootPhase is the step of a root record.
type RootPhase uint8

const (
	RootFormat RootPhase = iota + 1
	RootPublish
	RootDrop
)

var rootPhaseNames = [...]string{"", "format", "publish", "drop"}

func (p RootPhase) String() string {
	if int(p) < len(rootPhaseNames) && p > 0 {
		return rootPhaseNames[p]
	}
	return fmt.Sprintf("root phase(%d)", uint8(p))
}

// Layout is the value of a region record: the region's layout.
type Layout struct {
	Size, MeganodeSize uint64
	NodeSize           uint32
	// SizeClasses: small extents are slots of size-class slabs
	// (region flag bit 0).
	SizeClasses bool
}

// regionFlagSizeClasses is bit 0 of a region record's flags.
const regionFlagSizeClasses = 1 << 0

func AppendRegionBody(dst []byte, b Layout) []byte {
	dst = le.AppendUint64(dst, b.Size)
	dst = le.AppendUint64(dst, b.MeganodeSize)
	dst = le.AppendUint32(dst, b.NodeSize)
	var flags uint32
	if b.SizeClasses {
		flags |= regionFlagSizeClasses
	}
	return le.AppendUint32(dst, flags)
}

func DecodeRegionBody(v []byte) (Layout, error) {
	if len(v) != regionBodySize || le.Uint32(v[20:])&^regionFlagSizeClasses != 0 {
		return Layout{}, fmt.Errorf("rsm: %d-byte region body: %w", len(v), ErrBadRecord)
	}
	return Layout{Size: le.Uint64(v), MeganodeSize: le.Uint64(v[8:]), NodeSize: le.Uint32(v[16:]),
		SizeClasses: le.Uint32(v[20:])&regionFlagSizeClasses != 0}, nil
}

func AppendRootBody(dst []byte, p RootPhase) []byte {
	var b [rootBodySize]byte
	b[0] = byte(p)
	return append(dst, b[:]...)
}

func DecodeRootBody(v []byte) (RootPhase, error) {
	if len(v) != rootBodySize {
		return 0, fmt.Errorf("rsm: %d-byte root body: %w", len(v), ErrBadRecord)
	}
	for _, b := range v[1:] {
		if b != 0 {
			return 0, fmt.Errorf("rsm: root body reserved bytes: %w", ErrBadRecord)
		}
	}
	if p := RootPhase(v[0]); p >= RootFormat && p <= RootDrop {
		return p, nil
	}
	return 0, fmt.Errorf("rsm: root phase %d: %w", v[0], ErrBadRecord)
}

// TargetPhase is the step of a remote split's target a target record
// applies.
type TargetPhase uint8

const (
	TargetBegin TargetPhase = iota + 1
	TargetAppend
	TargetCommit
	TargetAbort
)

var targetPhaseNames = [...]string{"", "begin", "append", "commit", "abort"}

func (p TargetPhase) String() string {
	if int(p) < len(targetPhaseNames) && p > 0 {
		return targetPhaseNames[p]
	}
	return fmt.Sprintf("target phase(%d)", uint8(p))
}

// TargetBody is the value of a target record.
type TargetBody struct {
	Phase  TargetPhase
	MaxInf bool
	Level  uint16
	Right  blink.Ptr // begin
	// Clock (commit) is the source region's version clock when it sent
	// the commit; it shares Right's offset.
	Clock   uint64
	Source  blink.Ptr
	Payload []byte // aliases the record
}

const targetMaxInf = 1 << 0

func AppendTargetBody(dst []byte, b *TargetBody) []byte {
	var h [targetBodySize]byte
	h[0] = byte(b.Phase)
	if b.MaxInf {
		h[1] = targetMaxInf
	}
	le.PutUint16(h[2:], b.Level)
	le.PutUint64(h[8:], uint64(b.Right))
	if b.Phase == TargetCommit {
		le.PutUint64(h[8:], b.Clock)
	}
	le.PutUint64(h[16:], uint64(b.Source))
	return append(append(dst, h[:]...), b.Payload...)
}

func DecodeTargetBody(v []byte) (TargetBody, error) {
	if len(v) < targetBodySize {
		return TargetBody{}, fmt.Errorf("rsm: %d-byte target body: %w", len(v), ErrBadRecord)
	}
	b := TargetBody{Phase: TargetPhase(v[0]), MaxInf: v[1]&targetMaxInf != 0, Level: le.Uint16(v[2:]),
		Right: blink.Ptr(le.Uint64(v[8:])), Source: blink.Ptr(le.Uint64(v[16:])), Payload: v[targetBodySize:]}
	if b.Phase == TargetCommit {
		b.Clock, b.Right = uint64(b.Right), 0
	}
	switch {
	case b.Phase < TargetBegin || b.Phase > TargetAbort:
		return TargetBody{}, fmt.Errorf("rsm: target phase %d: %w", v[0], ErrBadRecord)
	case v[1]&^targetMaxInf != 0 || le.Uint32(v[4:]) != 0:
		return TargetBody{}, fmt.Errorf("rsm: target body reserved bits: %w", ErrBadRecord)
	case b.Phase == TargetCommit && len(b.Payload) > 0:
		if err := checkDigest(b.Payload); err != nil {
			return TargetBody{}, err
		}
	case b.Phase != TargetBegin && b.Phase != TargetAppend && len(b.Payload) > 0:
		return TargetBody{}, fmt.Errorf("rsm: target %v record with a payload: %w", b.Phase, ErrBadRecord)
	}
	return b, nil
}

// SplitPhase is the step of a split a split record applies.
type SplitPhase uint8

const (
	PhaseStart SplitPhase = iota + 1
	PhaseCopy
	PhaseLink
	PhaseFree
	PhaseRoot
	PhaseEnd
	PhaseAbort
)

var phaseNames = [...]string{"", "start", "copy", "link", "free", "root", "end", "abort"}

func (p SplitPhase) String() string {
	if int(p) < len(phaseNames) && p > 0 {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// SplitBody is the value of a split record.
type SplitBody struct {
	Phase  SplitPhase
	New    blink.Ptr // Y, or the new root meganode
	Batch  uint32
	Cursor []byte // aliases the record
}

func AppendSplitBody(dst []byte, b *SplitBody) []byte {
	var h [splitBodySize]byte
	h[0] = byte(b.Phase)
	le.PutUint64(h[8:], uint64(b.New))
	le.PutUint32(h[16:], b.Batch)
	return append(append(dst, h[:]...), b.Cursor...)
}

func DecodeSplitBody(v []byte) (SplitBody, error) {
	if len(v) < splitBodySize {
		return SplitBody{}, fmt.Errorf("rsm: %d-byte split body: %w", len(v), ErrBadRecord)
	}
	for _, b := range v[1:8] {
		if b != 0 {
			return SplitBody{}, fmt.Errorf("rsm: split body reserved bytes: %w", ErrBadRecord)
		}
	}
	b := SplitBody{Phase: SplitPhase(v[0]), New: blink.Ptr(le.Uint64(v[8:])), Batch: le.Uint32(v[16:]), Cursor: v[splitBodySize:]}
	switch {
	case b.Phase < PhaseStart || b.Phase > PhaseAbort:
		return SplitBody{}, fmt.Errorf("rsm: split phase %d: %w", v[0], ErrBadRecord)
	case le.Uint32(v[20:]) != 0:
		return SplitBody{}, fmt.Errorf("rsm: split body reserved word: %w", ErrBadRecord)
	case len(b.Cursor) > 0 && b.Phase != PhaseCopy && b.Phase != PhaseLink && b.Phase != PhaseRoot:
		return SplitBody{}, fmt.Errorf("rsm: %v record with a cursor: %w", b.Phase, ErrBadRecord)
	case b.Phase == PhaseLink && len(b.Cursor) != 0 && len(b.Cursor) != 8:
		return SplitBody{}, fmt.Errorf("rsm: link record with a %d-byte root: %w", len(b.Cursor), ErrBadRecord)
	}
	return b, nil
}

const (
	entriesInner = 1 << 0
	entriesWords = 1 << 1
)

// AppendEntries appends a target append record's entries; with words (leaf
// entries only), each entry's Word too.
func AppendEntries(dst []byte, inner, words bool, ents []blink.Entry) []byte {
	var h [8]byte
	if inner {
		h[0] = entriesInner
	} else if words {
		h[0] = entriesWords
	}
	le.PutUint32(h[4:], uint32(len(ents)))
	dst = append(dst, h[:]...)
	for _, e := range ents {
		dst = le.AppendUint32(dst, uint32(len(e.Key)))
		dst = append(dst, e.Key...)
		if inner {
			dst = le.AppendUint64(dst, uint64(e.Child))
		} else {
			dst = le.AppendUint32(dst, uint32(len(e.Value)))
			dst = append(dst, e.Value...)
			if words {
				dst = le.AppendUint64(dst, uint64(e.Word))
			}
		}
	}
	return dst
}

// DecodeEntries decodes a target append record's entries; keys and values
// alias b. Every length is checked against b; errors wrap ErrBadRecord.
func DecodeEntries(b []byte) (inner, words bool, ents []blink.Entry, err error) {
	bad := func(what string) (bool, bool, []blink.Entry, error) {
		return false, false, nil, fmt.Errorf("rsm: target append entries: %s: %w", what, ErrBadRecord)
	}
	if len(b) < 8 || b[0]&^(entriesInner|entriesWords) != 0 || b[0] == entriesInner|entriesWords || b[1]|b[2]|b[3] != 0 {
		return bad("header")
	}
	inner, words = b[0]&entriesInner != 0, b[0]&entriesWords != 0
	n := uint64(le.Uint32(b[4:]))
	b = b[8:]
	if n > uint64(len(b))/8 { // an entry takes at least 8 bytes
		return bad(fmt.Sprintf("%d entries in %d bytes", n, len(b)))
	}
	ents = make([]blink.Entry, 0, n)
	take := func(k uint64) ([]byte, bool) {
		if uint64(len(b)) < k {
			return nil, false
		}
		v := b[:k]
		b = b[k:]
		return v, true
	}
	for range n {
		var e blink.Entry
		kl, ok := take(4)
		if ok {
			e.Key, ok = take(uint64(le.Uint32(kl)))
		}
		if ok && inner {
			var c []byte
			if c, ok = take(8); ok {
				e.Child = blink.Ptr(le.Uint64(c))
			}
		} else if ok {
			var vl []byte
			if vl, ok = take(4); ok {
				e.Value, ok = take(uint64(le.Uint32(vl)))
			}
			if ok && words {
				var w []byte
				if w, ok = take(8); ok {
					e.Word = blink.Word(le.Uint64(w))
				}
			}
		}
		if !ok {
			return bad("truncated")
		}
		ents = append(ents, e)
	}
	if len(b) != 0 {
		return bad(fmt.Sprintf("%d bytes after the entries", len(b)))
	}
	return inner, words, ents, nil
}

// LevelEntry is one meganode of a global level: its min key ("\x00" for
// -inf) and its header pointer.
type LevelEntry struct {
	Key []byte
	Ptr blink.Ptr
}

// AppendRootEntries appends the entries of a root record's body (the
// cursor field): each [key length u32][key][child Ptr u64].
func AppendRootEntries(dst []byte, ents []LevelEntry) []byte {
	for _, e := range ents {
		dst = le.AppendUint32(dst, uint32(len(e.Key)))
		dst = append(dst, e.Key...)
		dst = le.AppendUint64(dst, uint64(e.Ptr))
	}
	return dst
}

// DecodeRootEntries decodes a root record's entries: at least one, keys
// non-empty and ascending, children not nil. Keys alias body.
func DecodeRootEntries(body []byte) ([]LevelEntry, error) {
	var ents []LevelEntry
	for len(body) > 0 {
		if len(body) < 4 {
			return nil, fmt.Errorf("rsm: root record entries truncated: %w", ErrBadRecord)
		}
		n := uint64(le.Uint32(body))
		if n == 0 || uint64(len(body)) < 4+n+8 {
			return nil, fmt.Errorf("rsm: root record entry of %d bytes in %d: %w", n, len(body), ErrBadRecord)
		}
		e := LevelEntry{Key: body[4 : 4+n], Ptr: blink.Ptr(le.Uint64(body[4+n:]))}
		if e.Ptr.IsNil() || len(ents) > 0 && bytes.Compare(ents[len(ents)-1].Key, e.Key) >= 0 {
			return nil, fmt.Errorf("rsm: root record entry %q → %v out of order: %w", e.Key, e.Ptr, ErrBadRecord)
		}
		ents = append(ents, e)
		body = body[4+n+8:]
	}
	if len(ents) == 0 {
		return nil, fmt.Errorf("rsm: root record without entries: %w", ErrBadRecord)
	}
	return ents, nil
}

// Record is a decoded write record; Key and Value alias the record.
type Record struct {
	Kind     uint8
	Flags    uint16
	Meganode blink.Ptr
	ClientID uint64
	Seq      uint64
	Key      []byte
	Value    []byte
}

var le = binary.LittleEndian

// AppendRecord appends the encoding of r to dst.
func AppendRecord(dst []byte, r *Record) []byte {
	var h [RecordHeaderSize]byte
	h[0] = recVersion
	h[1] = r.Kind
	le.PutUint16(h[2:], r.Flags)
	le.PutUint32(h[4:], uint32(len(r.Key)))
	le.PutUint64(h[8:], uint64(r.Meganode))
	le.PutUint64(h[16:], r.ClientID)
	le.PutUint64(h[24:], r.Seq)
	le.PutUint32(h[32:], uint32(len(r.Value)))
	dst = append(dst, h[:]...)
	dst = append(dst, r.Key...)
	return append(dst, r.Value...)
}

// DecodeRecord parses a record; errors wrap ErrBadRecord. It never panics.
func DecodeRecord(b []byte) (Record, error) {
	if len(b) < RecordHeaderSize {
		return Record{}, fmt.Errorf("rsm: %d-byte record: %w", len(b), ErrBadRecord)
	}
	if b[0] != recVersion || le.Uint16(b[2:])&^(FlagRetry|FlagFloor|FlagForgotten) != 0 || le.Uint32(b[36:]) != 0 {
		return Record{}, fmt.Errorf("rsm: record version %d or reserved bits: %w", b[0], ErrBadRecord)
	}
	r := Record{
		Kind:     b[1],
		Flags:    le.Uint16(b[2:]),
		Meganode: blink.Ptr(le.Uint64(b[8:])),
		ClientID: le.Uint64(b[16:]),
		Seq:      le.Uint64(b[24:]),
	}
	kl, vl := uint64(le.Uint32(b[4:])), uint64(le.Uint32(b[32:]))
	if RecordHeaderSize+kl+vl != uint64(len(b)) {
		return Record{}, fmt.Errorf("rsm: record lengths %d+%d do not fill %d bytes: %w", kl, vl, len(b), ErrBadRecord)
	}
	r.Key = b[RecordHeaderSize : RecordHeaderSize+kl]
	r.Value = b[RecordHeaderSize+kl:]
	switch {
	case (r.Kind < KindPut || r.Kind > KindCond) && r.Kind != KindVersion && r.Kind != KindTxn:
		return Record{}, fmt.Errorf("rsm: record kind %d: %w", r.Kind, ErrBadRecord)
	case r.Flags != 0 && (r.Kind != KindPut && r.Kind != KindDelete && r.Kind != KindCond && r.Kind != KindTxn || r.ClientID == 0 || r.Flags&FlagRetry != 0 && r.Flags != FlagRetry || r.Flags == FlagForgotten):
		return Record{}, fmt.Errorf("rsm: flags %#x on a %d record of client %d: %w", r.Flags, r.Kind, r.ClientID, ErrBadRecord)
	case r.Kind == KindVersion && (kl != 0 || vl != 0 || !r.Meganode.IsNil() || r.ClientID != 0 || r.Seq != 0):
		return Record{}, fmt.Errorf("rsm: version record with a key, value, meganode or client: %w", ErrBadRecord)
	case r.Kind == KindDelete && vl != 0:
		return Record{}, fmt.Errorf("rsm: delete record with a value: %w", ErrBadRecord)
	case r.Kind == KindChild && vl != 8:
		return Record{}, fmt.Errorf("rsm: child record with a %d-byte value: %w", vl, ErrBadRecord)
	case r.Kind == KindSplit:
		if _, err := DecodeSplitBody(r.Value); err != nil {
			return Record{}, err
		}
	case r.Kind == KindTarget:
		if _, err := DecodeTargetBody(r.Value); err != nil {
			return Record{}, err
		}
	case r.Kind == KindRegion:
		if _, err := DecodeRegionBody(r.Value); err != nil {
			return Record{}, err
		}
	case r.Kind == KindCond:
		if _, err := DecodeCondBody(r.Value); err != nil {
			return Record{}, err
		}
	case r.Kind == KindTxn:
		if kl != 0 {
			return Record{}, fmt.Errorf("rsm: txn record with a key: %w", ErrBadRecord)
		}
		if _, err := DecodeTxnBody(r.Value); err != nil {
			return Record{}, err
		}
	case r.Kind == KindRoot:
		if _, err := DecodeRootBody(r.Value); err != nil {
			return Record{}, err
		}
	}
	return r, nil
}

// Cond ops, targets and compares (the cond body's first three bytes).
const (
	CondPut    = 1
	CondDelete = 2

	CondVersion = 1
	CondValue   = 2
	CondPresent = 3
	CondAbsent  = 4

	CmpEqual    = 1
	CmpNotEqual = 2
	CmpLess     = 3
	CmpGreater  = 4

	condBodySize = 16
)

// CondBody is the value of a cond record.
type CondBody struct {
	Op, Target, Compare uint8
	ExpectedVersion     uint64
	Expected            []byte // aliases the record
	Value               []byte // aliases the record
}

// AppendCondBody appends the encoding of b.
func AppendCondBody(dst []byte, b *CondBody) []byte {
	var h [condBodySize]byte
	h[0], h[1], h[2] = b.Op, b.Target, b.Compare
	le.PutUint32(h[4:], uint32(len(b.Expected)))
	le.PutUint64(h[8:], b.ExpectedVersion)
	dst = append(dst, h[:]...)
	dst = append(dst, b.Expected...)
	return append(dst, b.Value...)
}

// DecodeCondBody decodes and checks a cond body; errors wrap ErrBadRecord.
func DecodeCondBody(v []byte) (CondBody, error) {
	bad := func(what string) (CondBody, error) {
		return CondBody{}, fmt.Errorf("rsm: cond body: %s: %w", what, ErrBadRecord)
	}
	if len(v) < condBodySize {
		return bad(fmt.Sprintf("%d bytes", len(v)))
	}
	b := CondBody{Op: v[0], Target: v[1], Compare: v[2], ExpectedVersion: le.Uint64(v[8:])}
	n := uint64(le.Uint32(v[4:]))
	if n > uint64(len(v)-condBodySize) {
		return bad("expected value past the end")
	}
	b.Expected, b.Value = v[condBodySize:condBodySize+n], v[condBodySize+n:]
	switch {
	case v[3] != 0:
		return bad("reserved byte")
	case b.Op != CondPut && b.Op != CondDelete:
		return bad(fmt.Sprintf("op %d", b.Op))
	case b.Target < CondVersion || b.Target > CondAbsent:
		return bad(fmt.Sprintf("target %d", b.Target))
	case (b.Target == CondVersion || b.Target == CondValue) && (b.Compare < CmpEqual || b.Compare > CmpGreater):
		return bad(fmt.Sprintf("compare %d", b.Compare))
	case (b.Target == CondPresent || b.Target == CondAbsent) && b.Compare != 0:
		return bad("a compare on presence")
	case b.Target != CondVersion && b.ExpectedVersion != 0:
		return bad("an expected version beside another target")
	case b.Target != CondValue && len(b.Expected) > 0:
		return bad("an expected value beside another target")
	case b.Op == CondDelete && len(b.Value) > 0:
		return bad("a delete with a value")
	}
	return b, nil
}

// holds evaluates the condition against the key's current state: its
// value and version when present.
func (b *CondBody) holds(present bool, value []byte, version uint64) bool {
	switch b.Target {
	case CondPresent:
		return present
	case CondAbsent:
		return !present
	case CondVersion:
		return compareHolds(b.Compare, cmp.Compare(version, b.ExpectedVersion))
	case CondValue:
		return present && compareHolds(b.Compare, bytes.Compare(value, b.Expected))
	}
	return false
}

// compareHolds reports whether c (-1, 0, 1: the key's against the expected)
// satisfies op.
func compareHolds(op uint8, c int) bool {
	switch op {
	case CmpEqual:
		return c == 0
	case CmpNotEqual:
		return c != 0
	case CmpLess:
		return c < 0
	case CmpGreater:
		return c > 0
	}
	return false
}
