package rsm

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/cellstore/cell/wire"
)

// The table keeps a client's last SessionWindow sequences and at most
// maxSessions clients, forgetting by log order alone; its snapshot
// encoding round-trips.
func TestSessionsBounds(t *testing.T) {
	var tab sessions
	for seq := uint64(1); seq <= SessionWindow+10; seq++ {
		tab.record(7, seq, seq%2 == 0, seq)
	}
	if _, dup := tab.lookup(7, 10); dup {
		t.Fatal("sequence 10 remembered past the window")
	}
	if found, dup := tab.lookup(7, SessionWindow+10); !dup || !found {
		t.Fatalf("latest sequence: found %v dup %v", found, dup)
	}
	for id := uint64(100); id < 100+maxSessions; id++ {
		tab.record(id, 1, false, 1000+id)
	}
	if _, dup := tab.lookup(7, SessionWindow+10); dup {
		t.Fatal("the client with the oldest write was not the one forgotten")
	}
	if len(tab.clients) != maxSessions {
		t.Fatalf("%d clients", len(tab.clients))
	}
	b := tab.appendTo(nil)
	got, err := readSessions(bytes.NewReader(b), replVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.appendTo(nil), b) {
		t.Fatal("the session table does not round-trip")
	}
	for _, cut := range []int{0, 3, 4, 20, len(b) - 1} {
		if _, err := readSessions(bytes.NewReader(b[:cut]), replVersion); err == nil {
			t.Fatalf("a table cut at %d bytes decoded", cut)
		}
	}
}

// A client's window, a ring once full, keeps its last SessionWindow
// sequences oldest first, in memory, in a clone and through a snapshot,
// and its floor is the highest sequence it forgot.
func TestSessionWindowRing(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	var tab sessions
	var model []uint64 // every sequence written, oldest first
	used := map[uint64]bool{}
	for i := range 3*SessionWindow + 17 {
		seq := rng.Uint64N(1 << 20)
		for used[seq] || seq == 0 {
			seq = rng.Uint64N(1 << 20)
		}
		used[seq] = true
		model = append(model, seq)
		tab.record(9, seq, seq%3 == 0, uint64(i+1))
		want := model[max(0, len(model)-SessionWindow):]
		s := tab.clients[9]
		if got := slices.Collect(s.order.all()); !slices.Equal(got, want) {
			t.Fatalf("after %d writes: window %v, want %v", i+1, got, want)
		}
		var floor uint64
		for _, f := range model[:len(model)-len(want)] {
			floor = max(floor, f)
		}
		if s.floor != floor {
			t.Fatalf("after %d writes: floor %d, want %d", i+1, s.floor, floor)
		}
		if len(s.found) != len(want) {
			t.Fatalf("after %d writes: %d sequences found, want %d", i+1, len(s.found), len(want))
		}
	}
	b := tab.appendTo(nil)
	c := tab.clone()
	if !bytes.Equal(c.appendTo(nil), b) {
		t.Fatal("a clone encodes differently")
	}
	got, err := readSessions(bytes.NewReader(b), replVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.appendTo(nil), b) {
		t.Fatal("the session table does not round-trip")
	}
	w := model[len(model)-SessionWindow:]
	if gw := slices.Collect(got.clients[9].order.all()); !slices.Equal(gw, w) {
		t.Fatalf("read back: window %v, want %v", gw, w)
	}
	// The restored window goes on as the original does.
	tab.record(9, 1<<21, false, 1<<20)
	got.record(9, 1<<21, false, 1<<20)
	if !bytes.Equal(got.appendTo(nil), tab.appendTo(nil)) {
		t.Fatal("the restored table and the original differ after one more write")
	}
}

// A retry after an unknown outcome is vouched for only while the table
// remembers everything of its client below it: not below what the
// client's window forgot, not for a forgotten client (the evicted
// filter), not below a source region's digest merged after a split.
func TestSessionsVouch(t *testing.T) {
	var tab sessions
	if !tab.vouches(7, 1) {
		t.Fatal("an empty table does not vouch for a client it never saw")
	}
	if tab.vouches(0, 1) {
		t.Fatal("the table vouches for a write without a client id")
	}
	for seq := uint64(1); seq <= SessionWindow+10; seq++ {
		tab.record(7, seq, false, seq)
	}
	if tab.vouches(7, 10) || tab.vouches(7, 1) {
		t.Fatal("the table vouches for sequences its window forgot")
	}
	if !tab.vouches(7, SessionWindow+11) {
		t.Fatal("the table does not vouch for a sequence above its window")
	}
	for id := uint64(100); id < 100+maxSessions; id++ {
		tab.record(id, 1, false, 1000+id)
	}
	if _, ok := tab.clients[7]; ok {
		t.Fatal("client 7 was not forgotten")
	}
	if tab.vouches(7, SessionWindow+11) {
		t.Fatal("the table vouches for a forgotten client")
	}
	tab.record(7, SessionWindow+20, false, 9000) // back, with a new session
	if tab.vouches(7, SessionWindow+11) {
		t.Fatal("the table vouches for a forgotten client that came back")
	}
	if !tab.vouches(5, 1) {
		t.Fatal("the table does not vouch for a client it never forgot (or the filter is full)")
	}

	// A digest raises the target's floors and carries the filter.
	var src, dst sessions
	src.record(1, 40, false, 1)
	src.record(1, 30, false, 2)
	src.record(2, 5, false, 3)
	dst.record(2, 9, false, 1)
	d := src.appendDigest(nil, wire.DefaultMaxFrameSize)
	if err := checkDigest(d); err != nil {
		t.Fatal(err)
	}
	dst.merge(d, 10)
	switch {
	case dst.vouches(1, 40), dst.vouches(1, 30), dst.vouches(1, 35):
		t.Fatal("the target vouches for a sequence the source may have applied")
	case dst.vouches(2, 5):
		t.Fatal("the target vouches for client 2's sequence 5")
	case !dst.vouches(1, 41), !dst.vouches(2, 6), !dst.vouches(3, 1):
		t.Fatal("the target refuses sequences the source never applied")
	}
	if _, dup := dst.lookup(2, 9); !dup {
		t.Fatal("the merge lost the target's own sequences")
	}
	if !dst.vouches(7, 1) {
		t.Fatal("the digest brought a filter the source did not have")
	}
	dst.merge(tab.appendDigest(nil, wire.DefaultMaxFrameSize), 20001)
	if dst.vouches(7, SessionWindow+30) {
		t.Fatal("the target vouches for a client the source forgot")
	}
	for _, bad := range [][]byte{nil, d[:7], d[:len(d)-1], append(bytes.Clone(d), 0)} {
		if checkDigest(bad) == nil {
			t.Fatalf("a %d-byte digest passed", len(bad))
		}
	}
	swapped := bytes.Clone(d)
	copy(swapped[digestHeaderSize:], d[digestHeaderSize+digestEntrySize:digestHeaderSize+2*digestEntrySize])
	copy(swapped[digestHeaderSize+digestEntrySize:], d[digestHeaderSize:digestHeaderSize+digestEntrySize])
	if checkDigest(swapped) == nil {
		t.Fatal("a digest with its clients out of order passed")
	}

	// Snapshots keep floors and the filter; version 1 tables still read.
	got, err := readSessions(bytes.NewReader(dst.appendTo(nil)), replVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.appendTo(nil), dst.appendTo(nil)) || !reflect.DeepEqual(got.evicted, dst.evicted) {
		t.Fatal("floors or the filter do not round-trip")
	}
	v1 := le.AppendUint32(nil, 1)
	v1 = le.AppendUint64(v1, 9)  // client
	v1 = le.AppendUint64(v1, 4)  // last index
	v1 = le.AppendUint32(v1, 1)  // one sequence
	v1 = le.AppendUint64(v1, 12) // seq 12, found
	v1 = append(v1, 1)
	old, err := readSessions(bytes.NewReader(v1), 1)
	if err != nil {
		t.Fatal(err)
	}
	if found, dup := old.lookup(9, 12); !dup || !found || !old.vouches(9, 13) || !old.vouches(10, 1) {
		t.Fatalf("version 1 table: found %v dup %v", found, dup)
	}
	// A version 1 table whose bounds were reached may have forgotten
	// sequences and clients without noting them.
	var full sessions
	for seq := uint64(1); seq <= SessionWindow+5; seq++ {
		full.record(1, seq, false, seq)
	}
	for id := uint64(2); id <= maxSessions; id++ {
		full.record(id, 1, false, 1000+id)
	}
	v1 = stripToV1(t, full.appendTo(nil))
	old, err = readSessions(bytes.NewReader(v1), 1)
	if err != nil {
		t.Fatal(err)
	}
	if old.vouches(1, SessionWindow+1) || old.vouches(1, 3) || old.vouches(maxSessions+1, 1) {
		t.Fatal("a full version 1 table vouches for what it may have forgotten")
	}
}

// stripToV1 rewrites a table's version 4 encoding as version 1: no
// floors, no filter, no versions.
func stripToV1(t *testing.T, b []byte) []byte {
	t.Helper()
	count := le.Uint32(b)
	out := le.AppendUint32(nil, count)
	b = b[4:]
	for range count {
		seqs := le.Uint32(b[16:])
		out = append(out, b[:sessionHeaderSizeV1]...)
		b = b[sessionHeaderSize:]
		for range seqs {
			out = append(out, b[:sessionEntrySizeV3]...)
			b = b[sessionEntrySize:]
		}
	}
	if le.Uint32(b) != 0 {
		t.Fatal("the table has a filter: version 1 had none")
	}
	return out
}

// BenchmarkSessionsNewClient: a write of a client the table has no
// session for, the table full (4,096 clients): it forgets one.
func BenchmarkSessionsNewClient(b *testing.B) {
	var tab sessions
	for id := uint64(1); id <= maxSessions; id++ {
		tab.record(id, 1, false, id)
	}
	id := uint64(maxSessions)
	b.ResetTimer()
	for b.Loop() {
		id++
		tab.record(id, 1, false, id)
	}
}

// BenchmarkSessionsKnownClient: a write of a client the table has a
// session for, the table full.
func BenchmarkSessionsKnownClient(b *testing.B) {
	var tab sessions
	for id := uint64(1); id <= maxSessions; id++ {
		tab.record(id, 1, false, id)
	}
	index, seq := uint64(maxSessions), uint64(1)
	b.ResetTimer()
	for b.Loop() {
		index++
		seq++
		tab.record(index%maxSessions+1, seq, false, index)
	}
}

// BenchmarkSessionsFullWindow: a write of a known client whose window
// is full (its SessionWindow last sequences remembered), the table full:
// the write forgets the client's oldest sequence.
func BenchmarkSessionsFullWindow(b *testing.B) {
	var tab sessions
	index := uint64(0)
	for seq := uint64(1); seq <= SessionWindow; seq++ {
		for id := uint64(1); id <= maxSessions; id++ {
			index++
			tab.record(id, seq, false, index)
		}
	}
	seq := uint64(SessionWindow)
	b.ResetTimer()
	for b.Loop() {
		index++
		id := index%maxSessions + 1
		if id == 1 {
			seq++
		}
		tab.record(id, seq, false, index)
	}
}

// The table forgets the client whose last write is oldest (the lowest id
// among equals), decided by the log alone so that replicas agree: checked
// against a scan of a model after every write, and across a snapshot.
func TestSessionsForgetOldest(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	var tab sessions
	model := map[uint64]uint64{} // client → last index
	index, seq := uint64(1), uint64(0)
	check := func(step int) {
		t.Helper()
		n := 0
		for s := tab.oldest; s != nil; s = s.next {
			if s.prev != nil && (s.prev.last > s.last || s.prev.last == s.last && s.prev.id >= s.id) || s.next == nil && tab.newest != s {
				t.Fatalf("step %d: the list is out of (last, id) order at client %d", step, s.id)
			}
			n++
		}
		if len(tab.clients) != len(model) || n != len(model) {
			t.Fatalf("step %d: %d clients, %d in the list, model %d", step, len(tab.clients), n, len(model))
		}
		for id, last := range model {
			if s := tab.clients[id]; s == nil || s.last != last {
				t.Fatalf("step %d: client %d: %+v, model last %d", step, id, s, last)
			}
		}
	}
	write := func(id uint64) {
		if _, ok := model[id]; !ok && len(model) >= maxSessions {
			var victim, oldest uint64
			first := true
			for v, last := range model {
				if first || last < oldest || last == oldest && v < victim {
					victim, oldest, first = v, last, false
				}
			}
			delete(model, victim)
		}
		model[id] = index
		seq++ // unique: apply records a pair once
		tab.record(id, seq, false, index)
	}
	for step := range 12_000 {
		switch k := rng.IntN(100); {
		case k < 2: // a snapshot and a restore
			got, err := readSessions(bytes.NewReader(tab.appendTo(nil)), replVersion)
			if err != nil {
				t.Fatal(err)
			}
			tab = got
		case k < 4: // a digest merged: its new clients share one index
			var src sessions
			for range rng.IntN(20) {
				src.record(rng.Uint64N(6000)+1, 1, false, 1)
			}
			tab.merge(src.appendDigest(nil, wire.DefaultMaxFrameSize), index)
			for _, id := range src.sortedIDs() { // merge's order
				if _, ok := model[id]; !ok && len(model) < maxSessions {
					model[id] = index
				}
			}
		case k < 30: // writes in one entry share its index
			for range 1 + rng.IntN(4) {
				write(rng.Uint64N(6000) + 1)
			}
		default:
			write(rng.Uint64N(6000) + 1)
		}
		index++
		if step%500 == 0 || step > 11_900 {
			check(step)
		}
	}
}

// A first attempt (FlagForgotten) of a client the table forgot whole is
// refused; records of older logs (FlagFloor without FlagForgotten) apply
// as then.
func TestForgottenClientRefused(t *testing.T) {
	var tab sessions
	tab.record(5, 1, false, 1)
	tab.markEvicted(9)
	for _, c := range []struct {
		flags  uint16
		client uint64
		want   error
	}{
		{FlagFloor | FlagForgotten, 9, ErrForgottenClient},
		{FlagFloor, 9, nil}, // an older log's record
		{FlagFloor | FlagForgotten, 5, nil},
		{FlagFloor | FlagForgotten, 10, nil},
	} {
		if got := tab.refusal(c.flags, c.client, 7); got != c.want {
			t.Errorf("refusal(%#x, client %d) = %v, want %v", c.flags, c.client, got, c.want)
		}
	}
}
