package rsm

import (
	"bytes"
	"fmt"
	"io"
	"slices"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
)

// The State is the replicated state of a region that is not in its
// image: whether the region record was applied, the applied index, a root
// meganode formatted and not yet published, the splits in progress, and
// the session table (sessions.go). A snapshot is the State's encoding,
// then the image (snapshot.go).
//
// State's encoding, little-endian:
//
//	0  magic u32 "CELS"   4 version u32 (4; 1 to 3 read too)
//	8  flags u32 (bit0 formatted, bit1 versioned)
//	12 split count u32    16 applied index u64   24 unpublished root Ptr u64
//	32 version clock u64  40 legacy version u64   (version 4)
//	then the splits in progress, each:
//	   0 X Ptr u64   8 Y Ptr u64   16 flags u32 (bit0 linked, bit1 freed)
//	   20 split key length u32   24 split key
//	then the session table (sessions.go), then the region image
const (
	replMagic      = 0x534c4543 // "CELS" little-endian
	replVersion    = 4          // 1: sessions without floors and evicted filter; 2: a legacy filter; 3: no versions
	replStateSize  = 32
	replClockSize  = 16 // version 4: the clock and the legacy version
	replFormatted  = 1 << 0
	replVersioned  = 1 << 1
	splitEntrySize = 24
	maxReplSplits  = 1 << 16

	progressLinked = 1 << 0
	progressFreed  = 1 << 1
)

// State is the replicated state of the region beside its image.
// Guarded by Machine.mu (written only by apply).
type State struct {
	// Formatted: the region record was applied (apply.go).
	Formatted bool
	// Applied is the index of the last log entry applied.
	Applied uint64
	// NewRoot is a root meganode formatted and not yet published (0 when
	// none): the only meganode above the root level an abort may drop.
	NewRoot blink.Ptr
	// Splits are the meganode splits of this region's meganodes started
	// and not yet ended or aborted, in start order: what a new leader or
	// a restarted server resumes or undoes (the server's split recovery).
	Splits []SplitProgress
	// Sessions is the at-most-once table of client writes (sessions.go).
	Sessions sessions

	// Legacy is U, the version record's index (docs/transactions.md
	// §2.6): the version of every entry written before it; 0 until it
	// applied (Versioned).
	Legacy uint64
	// Clock is the region's version clock (docs/transactions.md §2.2):
	// the highest version given or moved in, 0 before the version
	// record.
	Clock uint64
}

// Versioned reports whether the version record applied: every put gives
// its key a version from Clock.
func (st *State) Versioned() bool { return st.Legacy != 0 }

// SplitProgress is a split in progress as the log left it.
type SplitProgress struct {
	X, Y   blink.Ptr // the meganode split, and its new right half (any region)
	Sep    []byte
	Linked bool // the link record applied: the split must be finished
	Freed  bool // the last free record applied: the separator is next
}

// SplitOf returns the split in progress of meganode x, or nil.
func (st *State) SplitOf(x blink.Ptr) *SplitProgress {
	for i := range st.Splits {
		if st.Splits[i].X == x {
			return &st.Splits[i]
		}
	}
	return nil
}

// endSplit forgets the split of x.
func (st *State) endSplit(x blink.Ptr) {
	st.Splits = slices.DeleteFunc(st.Splits, func(p SplitProgress) bool { return p.X == x })
}

// Clone returns a deep copy, for readers outside apply.
func (st *State) Clone() State {
	c := *st
	c.Sessions = st.Sessions.clone()
	c.Splits = slices.Clone(st.Splits)
	for i := range c.Splits {
		c.Splits[i].Sep = bytes.Clone(c.Splits[i].Sep)
	}
	return c
}

// clone returns a deep copy of p.
func (p SplitProgress) clone() SplitProgress {
	p.Sep = bytes.Clone(p.Sep)
	return p
}

func (st *State) encode() []byte {
	b := make([]byte, replStateSize+replClockSize, replStateSize+replClockSize+len(st.Splits)*(splitEntrySize+16))
	le.PutUint32(b, replMagic)
	le.PutUint32(b[4:], replVersion)
	var flags uint32
	if st.Formatted {
		flags |= replFormatted
	}
	if st.Versioned() {
		flags |= replVersioned
	}
	le.PutUint32(b[8:], flags)
	le.PutUint32(b[12:], uint32(len(st.Splits)))
	le.PutUint64(b[16:], st.Applied)
	le.PutUint64(b[24:], uint64(st.NewRoot))
	le.PutUint64(b[32:], st.Clock)
	le.PutUint64(b[40:], st.Legacy)
	for _, p := range st.Splits {
		var flags uint32
		if p.Linked {
			flags |= progressLinked
		}
		if p.Freed {
			flags |= progressFreed
		}
		b = le.AppendUint64(b, uint64(p.X))
		b = le.AppendUint64(b, uint64(p.Y))
		b = le.AppendUint32(b, flags)
		b = le.AppendUint32(b, uint32(len(p.Sep)))
		b = append(b, p.Sep...)
	}
	return st.Sessions.appendTo(b)
}

// ReadState decodes a State from the head of a snapshot.
func ReadState(r io.Reader) (State, error) {
	corrupt := func(what string) (State, error) {
		return State{}, fmt.Errorf("rsm: snapshot state %s: %w", what, meganode.ErrCorruption)
	}
	b := make([]byte, replStateSize)
	if _, err := io.ReadFull(r, b); err != nil {
		return corrupt(err.Error())
	}
	version, flags := le.Uint32(b[4:]), le.Uint32(b[8:])
	known := uint32(replFormatted)
	if version >= 4 {
		known |= replVersioned
	}
	if le.Uint32(b) != replMagic || version < 1 || version > replVersion || flags&^known != 0 {
		return corrupt("header")
	}
	st := State{Formatted: flags&replFormatted != 0, Applied: le.Uint64(b[16:]), NewRoot: blink.Ptr(le.Uint64(b[24:]))}
	if version >= 4 {
		var c [replClockSize]byte
		if _, err := io.ReadFull(r, c[:]); err != nil {
			return corrupt("version clock")
		}
		st.Clock, st.Legacy = le.Uint64(c[:]), le.Uint64(c[8:])
		if (flags&replVersioned != 0) != st.Versioned() || st.Clock < st.Legacy {
			return corrupt("version clock fields")
		}
	}
	n := le.Uint32(b[12:])
	if n > maxReplSplits {
		return corrupt(fmt.Sprintf("with %d splits", n))
	}
	for range n {
		var e [splitEntrySize]byte
		if _, err := io.ReadFull(r, e[:]); err != nil {
			return corrupt("split entry")
		}
		flags, kl := le.Uint32(e[16:]), le.Uint32(e[20:])
		if flags&^(progressLinked|progressFreed) != 0 || kl == 0 || int(kl) > blink.MaxKeySize(blink.MaxNodeSize) {
			return corrupt("split entry fields")
		}
		p := SplitProgress{X: blink.Ptr(le.Uint64(e[:])), Y: blink.Ptr(le.Uint64(e[8:])), Linked: flags&progressLinked != 0, Freed: flags&progressFreed != 0,
			Sep: make([]byte, kl)}
		if _, err := io.ReadFull(r, p.Sep); err != nil {
			return corrupt("split key")
		}
		st.Splits = append(st.Splits, p)
	}
	var err error
	st.Sessions, err = readSessions(r, version)
	return st, err
}
