package rsm

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"iter"
	"slices"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
)

// The session table makes a retried write apply at most once (docs/design.md §9:
// "Writes carry a client id and a sequence number, and a region applies
// each at most once (a session table in its state machine), so a retry
// never applies a put twice around another client's write"). It is
// replicated state: apply alone changes it, in log order, and snapshots
// carry it (state.go).
//
// A put or delete record with a client id (not 0) is looked up by (client
// id, sequence): when that pair was applied before, the record changes
// nothing and answers what the first application answered (a delete's
// "found", a put's version). Only records that applied are remembered: a record refused
// (frozen, full, moved) did not happen, and its retry must apply.
//
// Bounds, both decided by the log alone so that replicas agree: a client's
// last SessionWindow sequences are remembered (a client's retries come
// within seconds of the first try, with far fewer writes in between), and
// at most maxSessions clients, the one whose last write is oldest (by log
// index) forgotten first.
//
// What the table forgot it must not deny. A retry after an unknown
// outcome (a record flagged FlagRetry) is applied only when the table can
// vouch that the first attempt did not apply (vouches): the pair is not
// remembered, its sequence is above every sequence the client's window
// forgot (the session's floor), and the client was never forgotten here
// (a forgotten client's id goes into the evicted filter, a scalable Bloom
// filter, evicted.go: a false positive only makes a retry's outcome
// unknown). A first attempt
// (FlagFloor) at or below its client's floor is refused the same way: the
// client's later writes passed it, and its retry may have applied and
// been forgotten. Keys that enter
// the region in a remote split bring what the source region's table knew
// of their writes, as floors (a digest, merge): a write applied to a key
// before the key moved is then never vouched for by the region it moved
// to.
const (
	SessionWindow = 256
	maxSessions   = 4096
)

// sessions is the table. Guarded by Machine.mu.
type sessions struct {
	clients map[uint64]*session
	// oldest and newest end a list of the sessions in (last, id) order:
	// the client to forget is the list's head, not found by a scan of
	// the table in apply (that took 50–80 µs for each write of a new client
	// once 4,096 were there; BenchmarkSessionsNewClient). A write moves
	// its session to the tail: its index is the newest.
	oldest, newest *session
	// evicted holds the ids of forgotten clients (empty while none was).
	evicted evictedFilter
}

// session is one client's remembered writes.
type session struct {
	id         uint64 // the client
	prev, next *session
	last       uint64             // log index of its last write
	found      map[uint64]outcome // sequence → what the write answered
	order      window             // the sequences in found, oldest first
	// floor: no sequence at or below it can be vouched for (the highest
	// sequence the window forgot, or a source region's digest named).
	floor uint64
}

// outcome is what a remembered write answered: whether a delete found
// its key (bit 0) and the version a put gave it (the bits above; 0 before
// the region had versions).
type outcome uint64

func makeOutcome(found bool, version uint64) outcome {
	o := outcome(version << 1)
	if found {
		o |= 1
	}
	return o
}

func (o outcome) found() bool     { return o&1 != 0 }
func (o outcome) version() uint64 { return uint64(o >> 1) }

// lookup reports whether (client, seq) was applied, and what it found.
func (t *sessions) lookup(client, seq uint64) (found, dup bool) {
	o, dup := t.lookupOutcome(client, seq)
	return o.found(), dup
}

// lookupOutcome reports whether (client, seq) was applied, and what it
// answered.
func (t *sessions) lookupOutcome(client, seq uint64) (o outcome, dup bool) {
	if s := t.clients[client]; s != nil {
		o, dup = s.found[seq]
	}
	return o, dup
}

// vouches reports whether the table proves that (client, seq) was never
// applied in this region: REQUIRES lookup found no duplicate.
func (t *sessions) vouches(client, seq uint64) bool {
	return client != 0 && !t.wasEvicted(client) && !t.belowFloor(client, seq)
}

// belowFloor reports whether seq is at or below client's floor: whether
// another attempt of (client, seq) may have applied and been forgotten.
// REQUIRES lookup found no duplicate.
func (t *sessions) belowFloor(client, seq uint64) bool {
	s := t.clients[client]
	return s != nil && seq <= s.floor
}

// refusal returns why a put or delete record with the given flags of
// (client, seq) must not apply, or nil: a retry the table cannot vouch
// for, a first attempt at or below its client's floor, or (FlagForgotten)
// a first attempt of a client the table forgot whole. REQUIRES
// lookup found no duplicate.
func (t *sessions) refusal(flags uint16, client, seq uint64) error {
	switch {
	case flags&FlagRetry != 0 && !t.vouches(client, seq):
		return ErrUnverifiable
	case flags&FlagFloor != 0 && t.belowFloor(client, seq):
		return ErrPassedFloor
	case flags&FlagForgotten != 0 && t.clients[client] == nil && t.wasEvicted(client):
		return ErrForgottenClient
	}
	return nil
}

// record remembers that (client, seq) applied at log index, finding found.
func (t *sessions) record(client, seq uint64, found bool, index uint64) {
	t.recordOutcome(client, seq, makeOutcome(found, 0), index)
}

// recordOutcome remembers that (client, seq) applied at log index,
// answering o.
func (t *sessions) recordOutcome(client, seq uint64, o outcome, index uint64) {
	s := t.session(client, index)
	t.unlink(s)
	s.last = index
	t.link(s)
	s.found[seq] = o
	if old, full := s.order.push(seq); full {
		s.floor = max(s.floor, old)
		delete(s.found, old)
	}
}

// window is a session's last SessionWindow sequences. Once full it is a
// ring: a write overwrites the oldest sequence in place (the 2 KiB shift
// of a slice that dropped its first entry cost every write of a client
// with a full window; BenchmarkSessionsFullWindow).
type window struct {
	seqs []uint64
	head int // where the oldest is, once len(seqs) == SessionWindow
}

// push adds seq as the newest; when the window was full it returns the
// oldest sequence, which it forgot.
func (w *window) push(seq uint64) (old uint64, full bool) {
	if len(w.seqs) < SessionWindow {
		w.seqs = append(w.seqs, seq)
		return 0, false
	}
	old, w.seqs[w.head] = w.seqs[w.head], seq
	w.head = (w.head + 1) % SessionWindow
	return old, true
}

func (w *window) len() int { return len(w.seqs) }

// all yields the sequences, oldest first.
func (w *window) all() iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		for i := range len(w.seqs) {
			if !yield(w.seqs[(w.head+i)%len(w.seqs)]) {
				return
			}
		}
	}
}

// max returns the highest sequence, or 0 when there is none.
func (w *window) max() uint64 {
	var hi uint64
	for _, seq := range w.seqs {
		hi = max(hi, seq)
	}
	return hi
}

func (w *window) clone() window {
	return window{seqs: slices.Clone(w.seqs), head: w.head}
}

// session returns client's session, made at log index (forgetting the
// oldest when the table is full) if it has none.
func (t *sessions) session(client, index uint64) *session {
	s := t.clients[client]
	if s == nil {
		if len(t.clients) >= maxSessions {
			t.evictOldest()
		}
		s = t.add(&session{id: client, last: index, found: make(map[uint64]outcome)})
	}
	return s
}

// add puts s, a client the table has no session for, in the table.
func (t *sessions) add(s *session) *session {
	if t.clients == nil {
		t.clients = make(map[uint64]*session)
	}
	t.clients[s.id] = s
	t.link(s)
	return s
}

// evictOldest forgets the client whose last write is oldest (the lowest
// client id among equals: a digest's floors have none), and notes its id
// in the evicted filter.
func (t *sessions) evictOldest() {
	victim := t.oldest
	t.unlink(victim)
	delete(t.clients, victim.id)
	t.markEvicted(victim.id)
}

// link puts s, unlinked, into the list at its (last, id) place: at the
// tail but for the sessions of its last index with a higher id (writes of
// one log entry share its index), which stay behind it.
func (t *sessions) link(s *session) {
	p := t.newest
	for p != nil && (p.last > s.last || p.last == s.last && p.id > s.id) {
		p = p.prev
	}
	s.prev = p
	if p == nil {
		s.next, t.oldest = t.oldest, s
	} else {
		s.next, p.next = p.next, s
	}
	if s.next == nil {
		t.newest = s
	} else {
		s.next.prev = s
	}
}

// unlink takes s out of the list.
func (t *sessions) unlink(s *session) {
	if s.prev == nil {
		t.oldest = s.next
	} else {
		s.prev.next = s.next
	}
	if s.next == nil {
		t.newest = s.prev
	} else {
		s.next.prev = s.prev
	}
	s.prev, s.next = nil, nil
}

// relink makes the list anew from the table's sessions.
func (t *sessions) relink() {
	all := make([]*session, 0, len(t.clients))
	for _, s := range t.clients {
		all = append(all, s)
	}
	slices.SortFunc(all, func(a, b *session) int {
		if c := cmp.Compare(a.last, b.last); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	t.oldest, t.newest = nil, nil
	for _, s := range all {
		s.prev, s.next = t.newest, nil
		if t.newest == nil {
			t.oldest = s
		} else {
			t.newest.next = s
		}
		t.newest = s
	}
}

// markEvicted notes client in the evicted filter.
func (t *sessions) markEvicted(client uint64) { t.evicted.add(client) }

// wasEvicted reports whether client may have been forgotten.
func (t *sessions) wasEvicted(client uint64) bool { return t.evicted.has(client) }

// clone returns a deep copy.
func (t *sessions) clone() sessions {
	c := sessions{clients: make(map[uint64]*session, len(t.clients)), evicted: t.evicted.clone()}
	for id, s := range t.clients {
		ns := &session{id: id, last: s.last, found: make(map[uint64]outcome, len(s.found)), order: s.order.clone(), floor: s.floor}
		for k, v := range s.found {
			ns.found[k] = v
		}
		c.clients[id] = ns
	}
	c.relink()
	return c
}

// A digest is what a remote split's target learns of the source region's
// table (the value of a target commit record, after the target body),
// little-endian:
//
//	0 flags u32 (bit0: a legacy evicted filter follows the floors, bit1:
//	  an evicted filter follows them; at most one of the two)
//	4 client count u32
//	8 per client, by ascending id: client id u64, floor u64 (the highest
//	  sequence of the client the source remembers or forgot)
//	then with bit0 (written before the filter had levels, read still) a
//	legacy filter, legacyFilterBits/8 bytes; with bit1 the filter
//	(evicted.go's encoding)
//
// The target raises each client's floor to the digest's and merges the
// filters (merge): the moving keys were frozen from the split's start, so
// every write applied to them is in the source's table, or forgotten there
// and so below a floor or in the filter.
const (
	digestHeaderSize = 8
	digestEntrySize  = 16
	digestLegacy     = 1 << 0
	digestLevels     = 1 << 1
)

// appendDigest appends t's digest to b, its filter shrunk (evicted.go)
// where the digest would take more than maxSize bytes.
func (t *sessions) appendDigest(b []byte, maxSize int) []byte {
	var flags uint32
	if !t.evicted.empty() {
		flags |= digestLevels
	}
	b = le.AppendUint32(b, flags)
	b = le.AppendUint32(b, uint32(len(t.clients)))
	for _, id := range t.sortedIDs() {
		s := t.clients[id]
		hi := max(s.floor, s.order.max())
		b = le.AppendUint64(b, id)
		b = le.AppendUint64(b, hi)
	}
	if t.evicted.empty() {
		return b
	}
	f := &t.evicted
	if room := maxSize - (digestHeaderSize + len(t.clients)*digestEntrySize); f.encodedSize() > room {
		s := f.shrunk(room)
		f = &s
	}
	return f.appendTo(b)
}

// checkDigest reports whether d is a well-formed digest.
func checkDigest(d []byte) error {
	_, _, _, err := parseDigest(d)
	return err
}

// parseDigest returns the n client entries of digest d and its filter
// (whose bits alias d).
func parseDigest(d []byte) (n int, ents []byte, filter evictedFilter, err error) {
	bad := func(what string) (int, []byte, evictedFilter, error) {
		return 0, nil, evictedFilter{}, fmt.Errorf("rsm: session digest: %s: %w", what, ErrBadRecord)
	}
	if len(d) < digestHeaderSize {
		return bad("truncated header")
	}
	flags, count := le.Uint32(d), le.Uint32(d[4:])
	if flags&^(digestLegacy|digestLevels) != 0 || flags == digestLegacy|digestLevels || count > maxSessions {
		return bad(fmt.Sprintf("flags %#x, %d clients", flags, count))
	}
	end := digestHeaderSize + int(count)*digestEntrySize
	if len(d) < end {
		return bad(fmt.Sprintf("%d bytes, want at least %d", len(d), end))
	}
	ents, rest := d[digestHeaderSize:end], d[end:]
	for i := 1; i < int(count); i++ {
		if le.Uint64(ents[i*digestEntrySize:]) <= le.Uint64(ents[(i-1)*digestEntrySize:]) {
			return bad("client ids out of order")
		}
	}
	switch {
	case flags&digestLegacy != 0:
		if len(rest) != legacyFilterBits/8 {
			return bad(fmt.Sprintf("a %d-byte legacy filter", len(rest)))
		}
		filter, rest = evictedFilter{levels: []filterLevel{{scheme: schemeLegacy, bits: rest}}}, nil
	case flags&digestLevels != 0:
		if filter, rest, err = readFilter(rest); err != nil {
			return bad(err.Error())
		}
		if filter.empty() {
			return bad("a filter of no level")
		}
	}
	if len(rest) != 0 {
		return bad(fmt.Sprintf("%d bytes after the digest", len(rest)))
	}
	return int(count), ents, filter, nil
}

// merge folds a source region's digest d (checked by checkDigest) into t
// at log index: a client's floor rises to the digest's (a session made
// for it if it has none and the table has room, else it is noted as
// evicted), and the evicted filters are merged.
func (t *sessions) merge(d []byte, index uint64) {
	n, ents, filter, err := parseDigest(d)
	if err != nil {
		return // DecodeRecord checked it
	}
	for i := range n {
		e := ents[i*digestEntrySize:]
		id, floor := le.Uint64(e), le.Uint64(e[8:])
		if id == 0 || floor == 0 {
			continue
		}
		switch s := t.clients[id]; {
		case s != nil:
			s.floor = max(s.floor, floor)
		case len(t.clients) < maxSessions:
			t.add(&session{id: id, last: index, found: make(map[uint64]outcome), floor: floor})
		default:
			// No room: the client is noted as forgotten rather than
			// forgetting one of this region's own.
			t.markEvicted(id)
		}
	}
	t.evicted.merge(&filter)
}

func (t *sessions) sortedIDs() []uint64 {
	ids := make([]uint64, 0, len(t.clients))
	for id := range t.clients {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// The table's encoding in a snapshot, after the splits (state.go),
// little-endian:
//
//	0 client count u32
//	then per client, by ascending id:
//	  0 client id u64   8 last index u64   16 sequence count u32
//	  20 floor u64 (snapshot version 2 on)
//	  then per sequence, oldest first: seq u64, found u8, and from
//	  version 4 on the put's version u64
//	then in version 2 the evicted filter's length u32 (0, or
//	legacyFilterBits/8) and a legacy filter; from version 3 on the
//	filter (evicted.go's encoding)
const (
	sessionHeaderSizeV1 = 20
	sessionHeaderSize   = 28
	sessionEntrySizeV3  = 9
	sessionEntrySize    = 17
)

func (t *sessions) appendTo(b []byte) []byte {
	ids := t.sortedIDs()
	b = le.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		s := t.clients[id]
		b = le.AppendUint64(b, id)
		b = le.AppendUint64(b, s.last)
		b = le.AppendUint32(b, uint32(s.order.len()))
		b = le.AppendUint64(b, s.floor)
		for seq := range s.order.all() {
			o := s.found[seq]
			b = le.AppendUint64(b, seq)
			f := byte(0)
			if o.found() {
				f = 1
			}
			b = append(b, f)
			b = le.AppendUint64(b, o.version())
		}
	}
	return t.evicted.appendTo(b)
}

// readSessions reads the table of a snapshot of state version version.
// A version 1 table kept no floors nor filter: a full window gets its
// highest sequence as floor, and a full table a filter with every bit set
// (what they may have forgotten is never vouched for). A version 2 table
// had one legacy level.
func readSessions(r io.Reader, version uint32) (sessions, error) {
	corrupt := func(what string) (sessions, error) {
		return sessions{}, fmt.Errorf("rsm: snapshot session table: %s: %w", what, meganode.ErrCorruption)
	}
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return corrupt(err.Error())
	}
	count := le.Uint32(n[:])
	if count > maxSessions {
		return corrupt(fmt.Sprintf("%d clients", count))
	}
	hsize := sessionHeaderSize
	if version < 2 {
		hsize = sessionHeaderSizeV1
	}
	t := sessions{clients: make(map[uint64]*session, count)}
	var prev uint64
	for i := range count {
		var h [sessionHeaderSize]byte
		if _, err := io.ReadFull(r, h[:hsize]); err != nil {
			return corrupt(err.Error())
		}
		id, seqs := le.Uint64(h[:]), le.Uint32(h[16:])
		// appendTo writes ids ascending; a digest's client may have no
		// sequences, only a floor.
		if seqs > SessionWindow || i > 0 && id <= prev || version < 2 && seqs == 0 {
			return corrupt(fmt.Sprintf("client %d with %d sequences", id, seqs))
		}
		prev = id
		s := &session{id: id, last: le.Uint64(h[8:]), found: make(map[uint64]outcome, seqs)}
		if version >= 2 {
			s.floor = le.Uint64(h[20:])
		}
		esize := sessionEntrySize
		if version < 4 {
			esize = sessionEntrySizeV3
		}
		buf := make([]byte, int(seqs)*esize)
		if _, err := io.ReadFull(r, buf); err != nil {
			return corrupt(err.Error())
		}
		for i := range int(seqs) {
			e := buf[i*esize:]
			seq := le.Uint64(e)
			var v uint64
			if version >= 4 {
				v = le.Uint64(e[9:])
			}
			if _, dup := s.found[seq]; dup || e[8] > 1 || v > blink.MaxVersion {
				return corrupt(fmt.Sprintf("client %d sequence %d", id, seq))
			}
			s.found[seq] = makeOutcome(e[8] == 1, v)
			s.order.push(seq) // seqs ≤ SessionWindow: none is forgotten
		}
		if version < 2 && s.order.len() == SessionWindow {
			// Version 1 kept no floor: a full window may have forgotten
			// any of the client's sequences so far.
			s.floor = s.order.max()
		}
		t.clients[id] = s
	}
	t.relink()
	if version < 2 {
		if count == maxSessions {
			// A full version 1 table may have forgotten clients, and
			// did not note which: none is vouched for if absent.
			t.evicted = legacyFilter(bytes.Repeat([]byte{0xff}, legacyFilterBits/8))
		}
		return t, nil
	}
	if version >= 3 {
		var err error
		if t.evicted, err = readFilterFrom(r); err != nil {
			return corrupt(err.Error())
		}
		return t, nil
	}
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return corrupt(err.Error())
	}
	switch fl := le.Uint32(n[:]); fl {
	case 0:
	case legacyFilterBits / 8:
		b := make([]byte, fl)
		if _, err := io.ReadFull(r, b); err != nil {
			return corrupt(err.Error())
		}
		t.evicted = evictedFilter{levels: []filterLevel{{scheme: schemeLegacy, bits: b}}}
	default:
		return corrupt(fmt.Sprintf("a %d-byte evicted filter", fl))
	}
	return t, nil
}
