package server

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/wire"
)

// Every write to the region goes through apply, which takes an encoded
// write record and changes memory deterministically: the outcome depends
// only on the region's contents, the replicated state beside it (fsm.go)
// and the record (blink's node and extent allocation are deterministic),
// never on the time, the connection, the worker or the server's flags.
// Records are proposed to the region's raft group (propose.go) and applied
// by the group's FSM (fsm.go) in log order, under applyMu, on every
// replica and on every replay of the log after a restart. Reads never take
// applyMu: blink readers are lock-free.
//
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
//	4 split   one step of a meganode split (split.go): the meganode is the
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
//	  16 source Ptr u64           X, for the operator (begin)
//	  24 begin: Y's max key; append: the entries (below); commit: the
//	     source region's session digest (session.go), or empty
//
// A target append's entries, X's entries in key order:
//
//	0  flags u8 (bit0 inner: children, no values)   1 reserved [3]u8 (0)
//	4  count u32
//	8  each entry: [key length u32][key], then an inner entry's
//	   [child Ptr u64] or a leaf entry's [value length u32][value]
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
//	  20 reserved u32 (0)
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
// is not applied again (the session table, session.go). One flagged retry
// (recRetry: the client sent it again after losing the first attempt's
// answer) is applied only if the table vouches that the first attempt was
// not; otherwise it fails with errUnverifiable and changes nothing. Any
// other write of a client is a first attempt (recFloor): it fails the same
// way when its sequence is at or below the client's floor, since the
// table no longer remembers whether another attempt of it applied (a
// first attempt still queued when its connection broke, arriving after
// the client's window passed it, must not apply after its retry did).
// With recForgotten too (set beside recFloor since the evicted filter has levels),
// a first attempt of a client the table forgot whole (no session, in the
// evicted filter) fails the same way: the table no longer knows any of
// its sequences, and the client starts over with a new id. Records of an
// older log without these flags apply as then. A
// target commit record's value may carry, after the target body, the
// source region's session digest (session.go), merged into this region's
// table.
const (
	recVersion    = 1
	recHeaderSize = 40

	recPut    = 1
	recDelete = 2
	recChild  = 3
	recSplit  = 4
	recTarget = 5
	recRegion = 6
	recRoot   = 7

	splitBodySize  = 24
	targetBodySize = 24
	regionBodySize = 24
	rootBodySize   = 8

	// Record flags, on put and delete records with a client id: recRetry
	// alone, or recFloor with or without recForgotten.
	recRetry     = 1 << 0 // a retry after an unknown outcome
	recFloor     = 1 << 1 // a first attempt, refused at or below the client's floor
	recForgotten = 1 << 2 // with recFloor: refused too if the table forgot the client
)

// rootPhase is the step of a root record.
type rootPhase uint8

const (
	rootFormat rootPhase = iota + 1
	rootPublish
	rootDrop
)

var rootPhaseNames = [...]string{"", "format", "publish", "drop"}

func (p rootPhase) String() string {
	if int(p) < len(rootPhaseNames) && p > 0 {
		return rootPhaseNames[p]
	}
	return fmt.Sprintf("root phase(%d)", uint8(p))
}

// regionBody is the value of a region record: the region's layout.
type regionBody struct {
	Size, MeganodeSize uint64
	NodeSize           uint32
}

func appendRegionBody(dst []byte, b regionBody) []byte {
	dst = le.AppendUint64(dst, b.Size)
	dst = le.AppendUint64(dst, b.MeganodeSize)
	dst = le.AppendUint32(dst, b.NodeSize)
	return le.AppendUint32(dst, 0)
}

func decodeRegionBody(v []byte) (regionBody, error) {
	if len(v) != regionBodySize || le.Uint32(v[20:]) != 0 {
		return regionBody{}, fmt.Errorf("server: %d-byte region body: %w", len(v), ErrBadRecord)
	}
	return regionBody{Size: le.Uint64(v), MeganodeSize: le.Uint64(v[8:]), NodeSize: le.Uint32(v[16:])}, nil
}

func appendRootBody(dst []byte, p rootPhase) []byte {
	var b [rootBodySize]byte
	b[0] = byte(p)
	return append(dst, b[:]...)
}

func decodeRootBody(v []byte) (rootPhase, error) {
	if len(v) != rootBodySize {
		return 0, fmt.Errorf("server: %d-byte root body: %w", len(v), ErrBadRecord)
	}
	for _, b := range v[1:] {
		if b != 0 {
			return 0, fmt.Errorf("server: root body reserved bytes: %w", ErrBadRecord)
		}
	}
	if p := rootPhase(v[0]); p >= rootFormat && p <= rootDrop {
		return p, nil
	}
	return 0, fmt.Errorf("server: root phase %d: %w", v[0], ErrBadRecord)
}

// targetPhase is the step of a remote split's target a target record
// applies.
type targetPhase uint8

const (
	targetBegin targetPhase = iota + 1
	targetAppend
	targetCommit
	targetAbort
)

var targetPhaseNames = [...]string{"", "begin", "append", "commit", "abort"}

func (p targetPhase) String() string {
	if int(p) < len(targetPhaseNames) && p > 0 {
		return targetPhaseNames[p]
	}
	return fmt.Sprintf("target phase(%d)", uint8(p))
}

// targetBody is the value of a target record.
type targetBody struct {
	Phase   targetPhase
	MaxInf  bool
	Level   uint16
	Right   blink.Ptr
	Source  blink.Ptr
	Payload []byte // aliases the record
}

const targetMaxInf = 1 << 0

func appendTargetBody(dst []byte, b *targetBody) []byte {
	var h [targetBodySize]byte
	h[0] = byte(b.Phase)
	if b.MaxInf {
		h[1] = targetMaxInf
	}
	le.PutUint16(h[2:], b.Level)
	le.PutUint64(h[8:], uint64(b.Right))
	le.PutUint64(h[16:], uint64(b.Source))
	return append(append(dst, h[:]...), b.Payload...)
}

func decodeTargetBody(v []byte) (targetBody, error) {
	if len(v) < targetBodySize {
		return targetBody{}, fmt.Errorf("server: %d-byte target body: %w", len(v), ErrBadRecord)
	}
	b := targetBody{Phase: targetPhase(v[0]), MaxInf: v[1]&targetMaxInf != 0, Level: le.Uint16(v[2:]),
		Right: blink.Ptr(le.Uint64(v[8:])), Source: blink.Ptr(le.Uint64(v[16:])), Payload: v[targetBodySize:]}
	switch {
	case b.Phase < targetBegin || b.Phase > targetAbort:
		return targetBody{}, fmt.Errorf("server: target phase %d: %w", v[0], ErrBadRecord)
	case v[1]&^targetMaxInf != 0 || le.Uint32(v[4:]) != 0:
		return targetBody{}, fmt.Errorf("server: target body reserved bits: %w", ErrBadRecord)
	case b.Phase == targetCommit && len(b.Payload) > 0:
		if err := checkDigest(b.Payload); err != nil {
			return targetBody{}, err
		}
	case b.Phase != targetBegin && b.Phase != targetAppend && len(b.Payload) > 0:
		return targetBody{}, fmt.Errorf("server: target %v record with a payload: %w", b.Phase, ErrBadRecord)
	}
	return b, nil
}

// splitPhase is the step of a split a split record applies.
type splitPhase uint8

const (
	phaseStart splitPhase = iota + 1
	phaseCopy
	phaseLink
	phaseFree
	phaseRoot
	phaseEnd
	phaseAbort
)

var phaseNames = [...]string{"", "start", "copy", "link", "free", "root", "end", "abort"}

func (p splitPhase) String() string {
	if int(p) < len(phaseNames) && p > 0 {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// splitBody is the value of a split record.
type splitBody struct {
	Phase  splitPhase
	New    blink.Ptr // Y, or the new root meganode
	Batch  uint32
	Cursor []byte // aliases the record
}

func appendSplitBody(dst []byte, b *splitBody) []byte {
	var h [splitBodySize]byte
	h[0] = byte(b.Phase)
	le.PutUint64(h[8:], uint64(b.New))
	le.PutUint32(h[16:], b.Batch)
	return append(append(dst, h[:]...), b.Cursor...)
}

func decodeSplitBody(v []byte) (splitBody, error) {
	if len(v) < splitBodySize {
		return splitBody{}, fmt.Errorf("server: %d-byte split body: %w", len(v), ErrBadRecord)
	}
	for _, b := range v[1:8] {
		if b != 0 {
			return splitBody{}, fmt.Errorf("server: split body reserved bytes: %w", ErrBadRecord)
		}
	}
	b := splitBody{Phase: splitPhase(v[0]), New: blink.Ptr(le.Uint64(v[8:])), Batch: le.Uint32(v[16:]), Cursor: v[splitBodySize:]}
	switch {
	case b.Phase < phaseStart || b.Phase > phaseAbort:
		return splitBody{}, fmt.Errorf("server: split phase %d: %w", v[0], ErrBadRecord)
	case le.Uint32(v[20:]) != 0:
		return splitBody{}, fmt.Errorf("server: split body reserved word: %w", ErrBadRecord)
	case len(b.Cursor) > 0 && b.Phase != phaseCopy && b.Phase != phaseLink && b.Phase != phaseRoot:
		return splitBody{}, fmt.Errorf("server: %v record with a cursor: %w", b.Phase, ErrBadRecord)
	case b.Phase == phaseLink && len(b.Cursor) != 0 && len(b.Cursor) != 8:
		return splitBody{}, fmt.Errorf("server: link record with a %d-byte root: %w", len(b.Cursor), ErrBadRecord)
	}
	return b, nil
}

const entriesInner = 1 << 0

// appendEntries appends a target append record's entries.
func appendEntries(dst []byte, inner bool, ents []blink.Entry) []byte {
	var h [8]byte
	if inner {
		h[0] = entriesInner
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
		}
	}
	return dst
}

// decodeEntries decodes a target append record's entries; keys and values
// alias b. Every length is checked against b; errors wrap ErrBadRecord.
func decodeEntries(b []byte) (inner bool, ents []blink.Entry, err error) {
	bad := func(what string) (bool, []blink.Entry, error) {
		return false, nil, fmt.Errorf("server: target append entries: %s: %w", what, ErrBadRecord)
	}
	if len(b) < 8 || b[0]&^entriesInner != 0 || b[1]|b[2]|b[3] != 0 {
		return bad("header")
	}
	inner = b[0]&entriesInner != 0
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
		}
		if !ok {
			return bad("truncated")
		}
		ents = append(ents, e)
	}
	if len(b) != 0 {
		return bad(fmt.Sprintf("%d bytes after the entries", len(b)))
	}
	return inner, ents, nil
}

// appendRootEntries appends the entries of a root record's body (the
// cursor field): each [key length u32][key][child Ptr u64].
func appendRootEntries(dst []byte, ents []levelEntry) []byte {
	for _, e := range ents {
		dst = le.AppendUint32(dst, uint32(len(e.key)))
		dst = append(dst, e.key...)
		dst = le.AppendUint64(dst, uint64(e.ptr))
	}
	return dst
}

// decodeRootEntries decodes a root record's entries: at least one, keys
// non-empty and ascending, children not nil. Keys alias body.
func decodeRootEntries(body []byte) ([]levelEntry, error) {
	var ents []levelEntry
	for len(body) > 0 {
		if len(body) < 4 {
			return nil, fmt.Errorf("server: root record entries truncated: %w", ErrBadRecord)
		}
		n := uint64(le.Uint32(body))
		if n == 0 || uint64(len(body)) < 4+n+8 {
			return nil, fmt.Errorf("server: root record entry of %d bytes in %d: %w", n, len(body), ErrBadRecord)
		}
		e := levelEntry{key: body[4 : 4+n], ptr: blink.Ptr(le.Uint64(body[4+n:]))}
		if e.ptr.IsNil() || len(ents) > 0 && bytes.Compare(ents[len(ents)-1].key, e.key) >= 0 {
			return nil, fmt.Errorf("server: root record entry %q → %v out of order: %w", e.key, e.ptr, ErrBadRecord)
		}
		ents = append(ents, e)
		body = body[4+n+8:]
	}
	if len(ents) == 0 {
		return nil, fmt.Errorf("server: root record without entries: %w", ErrBadRecord)
	}
	return ents, nil
}

// writeRecord is a decoded write record; Key and Value alias the record.
type writeRecord struct {
	Kind     uint8
	Flags    uint16
	Meganode blink.Ptr
	ClientID uint64
	Seq      uint64
	Key      []byte
	Value    []byte
}

var le = binary.LittleEndian

// appendRecord appends the encoding of r to dst.
func appendRecord(dst []byte, r *writeRecord) []byte {
	var h [recHeaderSize]byte
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

// decodeRecord parses a record; errors wrap ErrBadRecord. It never panics.
func decodeRecord(b []byte) (writeRecord, error) {
	if len(b) < recHeaderSize {
		return writeRecord{}, fmt.Errorf("server: %d-byte record: %w", len(b), ErrBadRecord)
	}
	if b[0] != recVersion || le.Uint16(b[2:])&^(recRetry|recFloor|recForgotten) != 0 || le.Uint32(b[36:]) != 0 {
		return writeRecord{}, fmt.Errorf("server: record version %d or reserved bits: %w", b[0], ErrBadRecord)
	}
	r := writeRecord{
		Kind:     b[1],
		Flags:    le.Uint16(b[2:]),
		Meganode: blink.Ptr(le.Uint64(b[8:])),
		ClientID: le.Uint64(b[16:]),
		Seq:      le.Uint64(b[24:]),
	}
	kl, vl := uint64(le.Uint32(b[4:])), uint64(le.Uint32(b[32:]))
	if recHeaderSize+kl+vl != uint64(len(b)) {
		return writeRecord{}, fmt.Errorf("server: record lengths %d+%d do not fill %d bytes: %w", kl, vl, len(b), ErrBadRecord)
	}
	r.Key = b[recHeaderSize : recHeaderSize+kl]
	r.Value = b[recHeaderSize+kl:]
	switch {
	case r.Kind < recPut || r.Kind > recRoot:
		return writeRecord{}, fmt.Errorf("server: record kind %d: %w", r.Kind, ErrBadRecord)
	case r.Flags != 0 && (r.Kind != recPut && r.Kind != recDelete || r.ClientID == 0 || r.Flags&recRetry != 0 && r.Flags != recRetry || r.Flags == recForgotten):
		return writeRecord{}, fmt.Errorf("server: flags %#x on a %d record of client %d: %w", r.Flags, r.Kind, r.ClientID, ErrBadRecord)
	case r.Kind == recDelete && vl != 0:
		return writeRecord{}, fmt.Errorf("server: delete record with a value: %w", ErrBadRecord)
	case r.Kind == recChild && vl != 8:
		return writeRecord{}, fmt.Errorf("server: child record with a %d-byte value: %w", vl, ErrBadRecord)
	case r.Kind == recSplit:
		if _, err := decodeSplitBody(r.Value); err != nil {
			return writeRecord{}, err
		}
	case r.Kind == recTarget:
		if _, err := decodeTargetBody(r.Value); err != nil {
			return writeRecord{}, err
		}
	case r.Kind == recRegion:
		if _, err := decodeRegionBody(r.Value); err != nil {
			return writeRecord{}, err
		}
	case r.Kind == recRoot:
		if _, err := decodeRootBody(r.Value); err != nil {
			return writeRecord{}, err
		}
	}
	return r, nil
}

// applyResult is what applying a record did.
type applyResult struct {
	// Found: a delete removed a key (false: the key was absent).
	Found bool
	// Next: a split copy's cursor for the next batch (nil: copy done).
	Next []byte
	// Done: a split free batch freed the last node of the right half.
	Done bool
	// Root: a target append's meganode's local root after the append.
	Root blink.Ptr
	// New: the meganode a record formatted (a local split's start, a
	// split's root, a target begin, a root format), in the slot apply
	// chose.
	New blink.Ptr
}

// apply applies an encoded write record, the log entry at index, to the
// region. It is the only writer of region memory once the server serves,
// and runs only on the raft group's FSM goroutine (fsm.go), or in tests
// that replay a log. Every error it returns is part of the record's
// deterministic outcome: every replica gets the same one.
func (rep *replica) apply(index uint64, rec []byte) (applyResult, error) {
	r, err := decodeRecord(rec)
	if err != nil {
		return applyResult{}, err
	}
	rep.applyMu.Lock()
	defer rep.applyMu.Unlock()
	rep.applied.Store(index)
	rep.repl.Applied = index
	// The index in the region too, whatever the outcome, in the region
	// the record leaves (a region record may make it anew): its image
	// then says which log index it is at.
	defer func() { rep.region.SetApplied(index) }()
	var res applyResult
	kind := "put"
	if !rep.repl.Formatted && r.Kind != recRegion {
		err = fmt.Errorf("server: %v record before the region record: %w", r.Kind, ErrBadRecord)
	}
	switch {
	case err != nil:
	case r.Kind == recPut, r.Kind == recDelete:
		lm := rep.meganodeAt(r.Meganode)
		if lm == nil || lm.m.Ptr() != r.Meganode || lm.level != 0 {
			return applyResult{}, fmt.Errorf("server: record for %v, not a leaf meganode of region %d: %w", r.Meganode, rep.regionID, ErrBadRecord)
		}
		if r.Kind == recDelete {
			kind = "delete"
		}
		if found, dup := rep.repl.Sessions.lookup(r.ClientID, r.Seq); dup && r.ClientID != 0 {
			kind += "_duplicate" // applied before: at most once
			res.Found = found
			break
		}
		if err = rep.repl.Sessions.refusal(r.Flags, r.ClientID, r.Seq); err != nil {
			kind += "_unverifiable"
			break
		}
		if r.Kind == recPut {
			err = lm.t.Put(r.Key, r.Value)
		} else {
			res.Found, err = lm.t.Delete(r.Key)
		}
		if err == nil && r.ClientID != 0 {
			rep.repl.Sessions.record(r.ClientID, r.Seq, res.Found, index)
		}
	case r.Kind == recChild:
		kind = "child"
		lm := rep.meganodeAt(r.Meganode)
		if lm == nil || lm.m.Ptr() != r.Meganode || lm.level == 0 {
			return applyResult{}, fmt.Errorf("server: child record for %v, not an inner meganode of region %d: %w", r.Meganode, rep.regionID, ErrBadRecord)
		}
		err = lm.t.InsertChild(r.Key, blink.Ptr(le.Uint64(r.Value)))
	case r.Kind == recSplit:
		b, _ := decodeSplitBody(r.Value) // decodeRecord checked it
		kind = "split_" + b.Phase.String()
		res, err = rep.applySplitLocked(&r, &b)
	case r.Kind == recTarget:
		b, _ := decodeTargetBody(r.Value) // decodeRecord checked it
		kind = "target_" + b.Phase.String()
		res, err = rep.applyTargetLocked(&r, &b)
	case r.Kind == recRegion:
		kind = "region"
		b, _ := decodeRegionBody(r.Value)
		err = rep.applyRegionLocked(b)
	case r.Kind == recRoot:
		p, _ := decodeRootBody(r.Value)
		kind = "root_" + p.String()
		res, err = rep.applyRootLocked(p, r.Meganode)
	}
	rep.srv.metrics.applies.WithLabelValues(kind, wire.StatusOf(wireError(err)).String()).Inc()
	if hook := rep.srv.opts.TestingKnobs.OnApply; hook != nil {
		hook(index, rec, err)
	}
	return res, err
}

// applyRegionLocked applies the region record: the first of the log,
// which pins the region's layout. A region made with other sizes (this
// server's flags differ from those the region was made with) is made
// again, empty, with the record's.
func (rep *replica) applyRegionLocked(b regionBody) error {
	if rep.repl.Formatted {
		return fmt.Errorf("server: a second region record: %w", ErrBadRecord)
	}
	lay := rep.region.Layout()
	if lay.Size != b.Size || lay.MeganodeSize != b.MeganodeSize || lay.NodeSize != uint64(b.NodeSize) {
		if err := rep.remakeRegionLocked(b); err != nil {
			return err
		}
	}
	rep.repl.Formatted = true
	return nil
}

// applyRootLocked applies a root record (phase p, for meganode mp).
func (rep *replica) applyRootLocked(p rootPhase, mp blink.Ptr) (applyResult, error) {
	switch p {
	case rootFormat:
		if !mp.IsNil() || !rep.repl.NewRoot.IsNil() {
			return applyResult{}, fmt.Errorf("server: root format record for %v while %v is unpublished: %w", mp, rep.repl.NewRoot, ErrBadRecord)
		}
		m, err := rep.newMeganodeLocked(0, blink.Full, func(*blink.Tree) error { return nil })
		if err != nil {
			return applyResult{}, err
		}
		rep.repl.NewRoot = m
		return applyResult{New: m}, nil
	case rootPublish:
		if lm := rep.meganodeAt(mp); lm == nil || lm.m.Ptr() != mp {
			return applyResult{}, fmt.Errorf("server: root publish record for %v, not a meganode here: %w", mp, ErrBadRecord)
		}
		rep.region.SetRoot(mp)
		if rep.repl.NewRoot == mp {
			rep.repl.NewRoot = 0
		}
		return applyResult{}, nil
	case rootDrop:
		lm := rep.meganodeAt(mp)
		if mp.IsNil() || rep.repl.NewRoot != mp || lm == nil || lm.m.Ptr() != mp {
			return applyResult{}, fmt.Errorf("server: root drop record for %v, not the unpublished root %v: %w", mp, rep.repl.NewRoot, ErrBadRecord)
		}
		rep.repl.NewRoot = 0
		return applyResult{}, rep.dropMeganode(lm.m.Slot())
	}
	return applyResult{}, fmt.Errorf("server: root phase %v: %w", p, ErrBadRecord)
}
