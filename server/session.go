package server

import (
	"fmt"
	"io"
	"slices"

	"github.com/cellstore/cell/meganode"
)

// The session table makes a retried write apply at most once (DESIGN §9:
// "Writes carry a client id and a sequence number, and a region applies
// each at most once (a session table in its state machine), so a retry
// never applies a put twice around another client's write"). It is
// replicated state: apply alone changes it, in log order, and snapshots
// carry it (fsm.go).
//
// A put or delete record with a client id (not 0) is looked up by (client
// id, sequence): when that pair was applied before, the record changes
// nothing and answers what the first application answered (a delete's
// "found"). Only records that applied are remembered: a record refused
// (frozen, full, moved) did not happen, and its retry must apply.
//
// Bounds, both decided by the log alone so that replicas agree: a client's
// last sessionWindow sequences are remembered (a client's retries come
// within seconds of the first try, with far fewer writes in between), and
// at most maxSessions clients, the one whose last write is oldest (by log
// index) forgotten first.
const (
	sessionWindow = 256
	maxSessions   = 4096
)

// sessions is the table. Guarded by applyMu.
type sessions struct {
	clients map[uint64]*session
}

// session is one client's remembered writes.
type session struct {
	last  uint64          // log index of its last write
	found map[uint64]bool // sequence → a delete found its key
	order []uint64        // sequences, oldest first
}

// lookup reports whether (client, seq) was applied, and what it found.
func (t *sessions) lookup(client, seq uint64) (found, dup bool) {
	if s := t.clients[client]; s != nil {
		found, dup = s.found[seq]
	}
	return found, dup
}

// record remembers that (client, seq) applied at log index, finding found.
func (t *sessions) record(client, seq uint64, found bool, index uint64) {
	if t.clients == nil {
		t.clients = make(map[uint64]*session)
	}
	s := t.clients[client]
	if s == nil {
		if len(t.clients) >= maxSessions {
			t.evictOldest()
		}
		s = &session{found: make(map[uint64]bool)}
		t.clients[client] = s
	}
	s.last = index
	s.found[seq] = found
	s.order = append(s.order, seq)
	if len(s.order) > sessionWindow {
		delete(s.found, s.order[0])
		s.order = slices.Delete(s.order, 0, 1)
	}
}

// evictOldest forgets the client whose last write is oldest (the lowest
// client id among equals: log indices are unique, so there are none).
func (t *sessions) evictOldest() {
	var victim uint64
	var oldest uint64
	first := true
	for id, s := range t.clients {
		if first || s.last < oldest || s.last == oldest && id < victim {
			victim, oldest, first = id, s.last, false
		}
	}
	delete(t.clients, victim)
}

// clone returns a deep copy.
func (t *sessions) clone() sessions {
	c := sessions{clients: make(map[uint64]*session, len(t.clients))}
	for id, s := range t.clients {
		ns := &session{last: s.last, found: make(map[uint64]bool, len(s.found)), order: slices.Clone(s.order)}
		for k, v := range s.found {
			ns.found[k] = v
		}
		c.clients[id] = ns
	}
	return c
}

// The table's encoding in a snapshot, after the splits (fsm.go),
// little-endian:
//
//	0 client count u32
//	then per client, by ascending id:
//	  0 client id u64   8 last index u64   16 sequence count u32
//	  then per sequence, oldest first: seq u64, found u8
const (
	sessionHeaderSize = 20
	sessionEntrySize  = 9
)

func (t *sessions) appendTo(b []byte) []byte {
	ids := make([]uint64, 0, len(t.clients))
	for id := range t.clients {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b = le.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		s := t.clients[id]
		b = le.AppendUint64(b, id)
		b = le.AppendUint64(b, s.last)
		b = le.AppendUint32(b, uint32(len(s.order)))
		for _, seq := range s.order {
			b = le.AppendUint64(b, seq)
			f := byte(0)
			if s.found[seq] {
				f = 1
			}
			b = append(b, f)
		}
	}
	return b
}

func readSessions(r io.Reader) (sessions, error) {
	corrupt := func(what string) (sessions, error) {
		return sessions{}, fmt.Errorf("server: snapshot session table: %s: %w", what, meganode.ErrCorruption)
	}
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return corrupt(err.Error())
	}
	count := le.Uint32(n[:])
	if count > maxSessions {
		return corrupt(fmt.Sprintf("%d clients", count))
	}
	t := sessions{clients: make(map[uint64]*session, count)}
	var prev uint64
	for i := range count {
		var h [sessionHeaderSize]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return corrupt(err.Error())
		}
		id, seqs := le.Uint64(h[:]), le.Uint32(h[16:])
		if seqs == 0 || seqs > sessionWindow || i > 0 && id <= prev { // appendTo writes ids ascending
			return corrupt(fmt.Sprintf("client %d with %d sequences", id, seqs))
		}
		prev = id
		s := &session{last: le.Uint64(h[8:]), found: make(map[uint64]bool, seqs)}
		buf := make([]byte, int(seqs)*sessionEntrySize)
		if _, err := io.ReadFull(r, buf); err != nil {
			return corrupt(err.Error())
		}
		for i := range int(seqs) {
			e := buf[i*sessionEntrySize:]
			seq := le.Uint64(e)
			if _, dup := s.found[seq]; dup || e[8] > 1 {
				return corrupt(fmt.Sprintf("client %d sequence %d", id, seq))
			}
			s.found[seq] = e[8] == 1
			s.order = append(s.order, seq)
		}
		t.clients[id] = s
	}
	return t, nil
}
