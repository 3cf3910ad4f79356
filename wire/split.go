package wire

import (
	"github.com/cellstore/cell/blink"
)

// Server-to-server ops of a remote meganode split (paper §2.2: "The server
// copies the nodes in X_right to a new local or remote meganode
// asynchronously"). The server splitting meganode X (the source) drives
// them against the server that hosts the new meganode Y (the target):
//
//	SplitBegin   format Y, frozen, with X's right half's range, level and
//	             right link; the reply names Y
//	SplitAppend* copy a batch of X's frozen leaf entries into Y (key and
//	             value in a leaf meganode, key and child in an inner one);
//	             the reply carries Y's local root, for X's right links
//	SplitEnd     thaw Y once X's old right half is freed (commit), or drop
//	             Y (abort, before X linked to it)
//	InsertChild  put the separator (key → child) into the meganode of a
//	             level that covers key, searching from Start across the
//	             servers as a search hop does
//	Meganode     describe the meganode holding a node: range, level,
//	             height and right link (the root's level is walked so)
const (
	// OpSplitBegin formats the target meganode of a remote split
	// (SplitBeginRequest, SplitBeginReply).
	OpSplitBegin Op = 0x30
	// OpSplitAppend appends a batch of entries to a split's target
	// (SplitAppendRequest, SplitAppendReply).
	OpSplitAppend Op = 0x31
	// OpSplitEnd thaws or drops a split's target (SplitEndRequest, empty
	// reply).
	OpSplitEnd Op = 0x32
	// OpInsertChild inserts a split's separator into the parent level
	// (InsertChildRequest, InsertChildReply).
	OpInsertChild Op = 0x33
	// OpMeganode describes the meganode of a node (MeganodeRequest,
	// MeganodeReply).
	OpMeganode Op = 0x34
)

var (
	_ Message = (*SplitBeginRequest)(nil)
	_ Message = (*SplitBeginReply)(nil)
	_ Message = (*SplitAppendRequest)(nil)
	_ Message = (*SplitAppendReply)(nil)
	_ Message = (*SplitEndRequest)(nil)
	_ Message = (*InsertChildRequest)(nil)
	_ Message = (*InsertChildReply)(nil)
	_ Message = (*MeganodeRequest)(nil)
	_ Message = (*MeganodeReply)(nil)
)

// SplitBeginRequest asks the target server to format the meganode that
// takes the right half of Source: global level Level, key range Range
// ([sep, X.max)) and right link Right (X's, where the level goes on).
// Epoch is the target region's epoch as the source knows it (0:
// unchecked).
//
//	[source u64][epoch u64][level u16][right u64][key range]
type SplitBeginRequest struct {
	Source blink.Ptr
	Epoch  uint64
	Level  uint16
	Right  blink.Ptr
	Range  KeyRange
}

func (m *SplitBeginRequest) AppendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Source))
	b = appendU64(b, m.Epoch)
	b = appendU16(b, m.Level)
	b = appendU64(b, uint64(m.Right))
	return m.Range.appendTo(b)
}

func (m *SplitBeginRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("split begin request")
}

func (m *SplitBeginRequest) decode(d *decoder) {
	m.Source = blink.Ptr(d.u64("source"))
	m.Epoch = d.u64("epoch")
	m.Level = d.u16("level")
	m.Right = blink.Ptr(d.u64("right"))
	m.Range.decode(d)
	if d.err == nil && (m.Range.MinInf || len(m.Range.Min) == 0) {
		d.failf("split range %v has no split key", m.Range)
	}
}

// SplitBeginReply names the new meganode (its header pointer).
//
//	[meganode u64]
type SplitBeginReply struct {
	Meganode blink.Ptr
}

func (m *SplitBeginReply) AppendTo(b []byte) []byte { return appendU64(b, uint64(m.Meganode)) }

func (m *SplitBeginReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("split begin reply")
}

func (m *SplitBeginReply) decode(d *decoder) {
	m.Meganode = blink.Ptr(d.u64("meganode"))
}

// SplitEntry is one leaf entry of a split's right half: a key and its
// value (leaf meganodes), or a key and the child meganode it leads to
// (inner meganodes).
type SplitEntry struct {
	Key   []byte
	Value []byte
	Child blink.Ptr
	Word  blink.Word // with SplitAppendRequest.Words
}

// SplitAppendRequest appends Entries, in key order above every key Y
// holds, to the split target Meganode. Inner is set for an inner
// meganode's entries (children, no values).
//
//	[meganode u64][flags u8: bit0 inner, bit1 words][count u32]
//	count × ([key bytes][value bytes])             leaf meganode
//	count × ([key bytes][value bytes][word u64])   leaf meganode, words
//	count × ([key bytes][child u64])               inner meganode
//
// Words (leaf entries of a region with versions, docs/transactions.md
// §2.3) carry each entry's blink.Word, so that a key keeps its version
// when it moves.
type SplitAppendRequest struct {
	Meganode blink.Ptr
	Inner    bool
	Words    bool
	Entries  []SplitEntry
}

const (
	splitInner = 1 << 0
	splitWords = 1 << 1
)

func (m *SplitAppendRequest) AppendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Meganode))
	b = appendU8(b, bit(m.Inner, splitInner)|bit(m.Words, splitWords))
	b = appendU32(b, uint32(len(m.Entries)))
	for i := range m.Entries {
		e := &m.Entries[i]
		b = appendBytes(b, e.Key)
		if m.Inner {
			b = appendU64(b, uint64(e.Child))
		} else {
			b = appendBytes(b, e.Value)
			if m.Words {
				b = appendU64(b, uint64(e.Word))
			}
		}
	}
	return b
}

// Decode decodes the request; the entry list reuses m's capacity, keys and
// values alias body.
func (m *SplitAppendRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("split append request")
}

func (m *SplitAppendRequest) decode(d *decoder) {
	m.Meganode = blink.Ptr(d.u64("meganode"))
	f := d.flags(splitInner|splitWords, "split append flags")
	m.Inner, m.Words = f&splitInner != 0, f&splitWords != 0
	if m.Inner && m.Words {
		d.failf("split append: words on inner entries")
	}
	n := d.count(4+4, "split entries")
	m.Entries = m.Entries[:0]
	for range n {
		var e SplitEntry
		e.Key = d.bytes("entry key")
		if m.Inner {
			e.Child = blink.Ptr(d.u64("entry child"))
		} else {
			e.Value = d.bytes("entry value")
			if m.Words {
				e.Word = blink.Word(d.u64("entry word"))
			}
		}
		if d.err != nil {
			break
		}
		m.Entries = append(m.Entries, e)
	}
}

// SplitAppendReply carries the target's local root after the append: the
// node the source's boundary right links will point to.
//
//	[root u64]
type SplitAppendReply struct {
	Root blink.Ptr
}

func (m *SplitAppendReply) AppendTo(b []byte) []byte { return appendU64(b, uint64(m.Root)) }

func (m *SplitAppendReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("split append reply")
}

func (m *SplitAppendReply) decode(d *decoder) {
	m.Root = blink.Ptr(d.u64("root"))
}

// SplitEndRequest ends the target's part in a split: with Commit, Y is
// thawed (X's old right half is gone, Y takes writes); without, Y is
// dropped (the split was aborted before X linked to Y). Sessions is, with
// Commit, what the source region's at-most-once table knows of the writes
// to the keys that moved (the server's session digest, opaque here;
// empty: nothing). Clock is, with Commit, the source region's version
// clock (docs/transactions.md §2.3; 0: a region without versions), which
// the target's clock is raised to.
//
//	[meganode u64][flags u8: bit0 commit, bit1 clock][sessions bytes][clock u64, if bit1]
//
// (Before versions the flags byte was a bool: 0 or 1.)
type SplitEndRequest struct {
	Meganode blink.Ptr
	Commit   bool
	Sessions []byte
	Clock    uint64
}

const (
	splitEndCommit = 1 << 0
	splitEndClock  = 1 << 1
)

func (m *SplitEndRequest) AppendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Meganode))
	b = appendU8(b, bit(m.Commit, splitEndCommit)|bit(m.Clock != 0, splitEndClock))
	b = appendBytes(b, m.Sessions)
	if m.Clock != 0 {
		b = appendU64(b, m.Clock)
	}
	return b
}

func (m *SplitEndRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("split end request")
}

func (m *SplitEndRequest) decode(d *decoder) {
	m.Meganode = blink.Ptr(d.u64("meganode"))
	f := d.flags(splitEndCommit|splitEndClock, "split end flags")
	m.Commit = f&splitEndCommit != 0
	m.Sessions = d.bytes("sessions")
	if f&splitEndClock != 0 {
		if m.Clock = d.u64("clock"); m.Clock == 0 && d.err == nil {
			d.failf("split end: a clock flag with clock 0")
		}
	}
	if d.err == nil && !m.Commit && (len(m.Sessions) > 0 || m.Clock != 0) {
		d.failf("an abort with sessions or a clock")
	}
}

// InsertChildRequest puts Key → Child into the meganode of global level
// Level covering Key, searching from Start (nil: the root) down and right
// through the receiving server's meganodes. The separator of a split of a
// level-(Level-1) meganode.
//
//	[start u64][level u16][child u64][key bytes]
type InsertChildRequest struct {
	Start blink.Ptr
	Level uint16
	Child blink.Ptr
	Key   []byte
}

func (m *InsertChildRequest) AppendTo(b []byte) []byte {
	b = appendU64(b, uint64(m.Start))
	b = appendU16(b, m.Level)
	b = appendU64(b, uint64(m.Child))
	return appendBytes(b, m.Key)
}

func (m *InsertChildRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("insert child request")
}

func (m *InsertChildRequest) decode(d *decoder) {
	m.Start = blink.Ptr(d.u64("start"))
	m.Level = d.u16("level")
	m.Child = blink.Ptr(d.u64("child"))
	m.Key = d.bytes("key")
	if d.err == nil && (m.Level == 0 || m.Child.IsNil() || len(m.Key) == 0) {
		d.failf("insert child: level %d, child %v, %d-byte key", m.Level, m.Child, len(m.Key))
	}
}

// InsertChildReply says the separator is in (Done), or where the search
// for its meganode goes on: Next, on another server.
//
//	[done bool][next u64]
type InsertChildReply struct {
	Done bool
	Next blink.Ptr
}

func (m *InsertChildReply) AppendTo(b []byte) []byte {
	return appendU64(appendBool(b, m.Done), uint64(m.Next))
}

func (m *InsertChildReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("insert child reply")
}

func (m *InsertChildReply) decode(d *decoder) {
	m.Done = d.bool("done")
	m.Next = blink.Ptr(d.u64("next"))
	if d.err == nil && m.Done == !m.Next.IsNil() {
		d.failf("insert child reply: done %v with next %v", m.Done, m.Next)
	}
}

// MeganodeRequest asks for the meganode that holds node Ptr.
//
//	[ptr u64]
type MeganodeRequest struct {
	Ptr blink.Ptr
}

func (m *MeganodeRequest) AppendTo(b []byte) []byte { return appendU64(b, uint64(m.Ptr)) }

func (m *MeganodeRequest) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("meganode request")
}

func (m *MeganodeRequest) decode(d *decoder) {
	m.Ptr = blink.Ptr(d.u64("ptr"))
}

// MeganodeReply describes a meganode and its right link: the node of the
// next meganode of its level (nil at the right end of the key space), and
// SplitNew, the new meganode of the split of this meganode in progress as
// its region's applied log has it (nil when none): a remote split's
// target asks it to tell whether its source still splits into it.
//
//	[meganode][right u64][split new u64]
type MeganodeReply struct {
	Meganode Meganode
	Right    blink.Ptr
	SplitNew blink.Ptr
}

func (m *MeganodeReply) AppendTo(b []byte) []byte {
	return appendU64(appendU64(m.Meganode.appendTo(b), uint64(m.Right)), uint64(m.SplitNew))
}

func (m *MeganodeReply) Decode(body []byte) error {
	d := decoder{b: body}
	m.decode(&d)
	return d.finish("meganode reply")
}

func (m *MeganodeReply) decode(d *decoder) {
	m.Meganode.decode(d)
	m.Right = blink.Ptr(d.u64("right"))
	m.SplitNew = blink.Ptr(d.u64("split new"))
}
