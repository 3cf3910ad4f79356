package rsm

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/cellstore/cell/wire"
)

// falsePositives returns the share of ids in [from, from+n) that f holds.
func falsePositives(f *evictedFilter, from, n uint64) float64 {
	hits := 0
	for id := from; id < from+n; id++ {
		if f.has(id) {
			hits++
		}
	}
	return float64(hits) / float64(n)
}

func mustHoldAll(t *testing.T, f *evictedFilter, from, n uint64) {
	t.Helper()
	for id := from; id < from+n; id++ {
		if !f.has(id) {
			t.Fatalf("id %d was added and is not held", id)
		}
	}
}

// docs/design.md §9: "a region applies each at most once (a session table in its
// state machine)". The table forgets clients, and a retry of a forgotten
// client must not be vouched for: the filter never drops an id it was
// given, and (unlike the one 8 KiB level it replaces) its false positives
// stay bounded as ids keep coming, up to its memory bound.
func TestEvictedFilterGrows(t *testing.T) {
	var f evictedFilter
	if f.has(1) || !f.empty() {
		t.Fatal("the empty filter holds an id")
	}
	const n = 300_000
	for id := uint64(1); id <= n; id++ {
		f.add(id)
	}
	mustHoldAll(t, &f, 1, n)
	var sizes []int
	for _, l := range f.levels {
		sizes = append(sizes, len(l.bits))
		if l.count > l.capacity() {
			t.Fatalf("a level of %d bytes holds %d ids, capacity %d", len(l.bits), l.count, l.capacity())
		}
	}
	want := []int{8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10}
	if !reflect.DeepEqual(sizes, want) {
		t.Fatalf("levels of %v bytes, want %v", sizes, want)
	}
	// 7 levels, each at most 4.6e-4 false positives at capacity.
	if fp := falsePositives(&f, 1<<40, 200_000); fp > 7*4.6e-4 {
		t.Fatalf("%.4f%% false positives after %d ids", 100*fp, n)
	}
	// The one 8 KiB, 3-probe level of state version 2, for comparison:
	// above half its bits set at this many ids.
	legacy := legacyFilter(make([]byte, legacyFilterBits/8))
	for id := uint64(1); id <= n; id++ {
		for _, p := range legacyBits(id) {
			legacy.levels[0].bits[p/8] |= 1 << (p % 8)
		}
	}
	mustHoldAll(t, &legacy, 1, n)
	if fp := falsePositives(&legacy, 1<<40, 20_000); fp < 0.9 {
		t.Fatalf("the legacy level errs for only %.2f of ids at %d: the comparison is off", fp, n)
	}
}

// Past maxFilterBytes the largest level takes the ids beyond its capacity:
// memory stays bounded and no id is lost. With -v it prints the false
// positives as ids are added, beside the single 8 KiB, 3-probe filter of
// state version 2 (docs/durability.md's table).
func TestEvictedFilterBound(t *testing.T) {
	if testing.Short() {
		t.Skip("adds 2 million ids")
	}
	var f evictedFilter
	legacy := legacyFilter(make([]byte, legacyFilterBits/8))
	const n = 2_000_000
	marks := []uint64{4096, 10_000, 35_000, 100_000, 1_044_480, 1_500_000, n}
	for id := uint64(1); id <= n; id++ {
		f.add(id)
		for _, p := range legacyBits(id) {
			legacy.levels[0].bits[p/8] |= 1 << (p % 8)
		}
		if len(marks) > 0 && id == marks[0] {
			marks = marks[1:]
			t.Logf("%9d ids: %d levels, %7d bytes, %6.3f%% false positives; the 8 KiB filter %6.2f%%", id, len(f.levels), f.bytes(),
				100*falsePositives(&f, 1<<40, 100_000), 100*falsePositives(&legacy, 1<<40, 100_000))
		}
	}
	if f.bytes() > maxFilterBytes {
		t.Fatalf("%d bytes of levels, bound %d", f.bytes(), maxFilterBytes)
	}
	mustHoldAll(t, &f, 1, n)
}

// A merged filter holds both filters' ids; merging the same levels again
// adds nothing; merging past the bound folds and still holds every id.
func TestEvictedFilterMerge(t *testing.T) {
	var a, b evictedFilter
	for id := uint64(1); id <= 10_000; id++ {
		a.add(id)
	}
	for id := uint64(1_000_001); id <= 1_003_000; id++ {
		b.add(id)
	}
	a.merge(&b)
	mustHoldAll(t, &a, 1, 10_000)
	mustHoldAll(t, &a, 1_000_001, 3_000)
	size := a.bytes()
	a.merge(&b)
	if a.bytes() != size {
		t.Fatalf("merging the same levels again grew the filter from %d to %d bytes", size, a.bytes())
	}
	for id := uint64(1); id <= 10_000; id++ { // fills a's merged last level too
		a.add(id + 5_000_000)
	}
	mustHoldAll(t, &a, 5_000_001, 10_000)

	// Big filters: the second can no longer be appended whole.
	if testing.Short() {
		return
	}
	var big1, big2 evictedFilter
	for id := uint64(1); id <= 700_000; id++ {
		big1.add(id)
		big2.add(id + 10_000_000)
	}
	big1.merge(&big2)
	if big1.bytes() > maxFilterBytes {
		t.Fatalf("%d bytes after a merge, bound %d", big1.bytes(), maxFilterBytes)
	}
	mustHoldAll(t, &big1, 1, 700_000)
	mustHoldAll(t, &big1, 10_000_001, 700_000)
	// A target holding one large level only: a small level is folded
	// into it once the bound is reached (the large level folded down).
	c := evictedFilter{levels: []filterLevel{big1.levels[len(big1.levels)-1].clone()}}
	var small evictedFilter
	for id := uint64(20_000_001); id <= 20_001_000; id++ {
		small.add(id)
	}
	for c.bytes()+len(small.levels[0].bits) <= maxFilterBytes {
		c.levels = append(c.levels, filterLevel{scheme: schemeDouble, bits: make([]byte, filterMinBytes<<4)})
	}
	before := c.clone()
	c.merge(&small)
	mustHoldAll(t, &c, 20_000_001, 1_000)
	for id := uint64(1); id <= 700_000; id++ {
		if before.levels[0].has(id) && !c.has(id) {
			t.Fatalf("id %d lost in a fold", id)
		}
	}
}

// The encoding round-trips, and malformed encodings are refused.
func TestEvictedFilterEncoding(t *testing.T) {
	var f evictedFilter
	for id := uint64(1); id <= 5_000; id++ {
		f.add(id)
	}
	f.merge(&evictedFilter{levels: []filterLevel{{scheme: schemeLegacy, bits: bytes.Repeat([]byte{0x5a}, legacyFilterBits/8)}}})
	b := f.appendTo(nil)
	got, rest, err := readFilter(append(bytes.Clone(b), 7))
	if err != nil || !bytes.Equal(rest, []byte{7}) {
		t.Fatalf("readFilter: %v, rest %v", err, rest)
	}
	if !reflect.DeepEqual(got, f) {
		t.Fatal("the filter does not round-trip")
	}
	if got, err := readFilterFrom(bytes.NewReader(b)); err != nil || !reflect.DeepEqual(got, f) {
		t.Fatalf("readFilterFrom: %v", err)
	}
	for _, cut := range []int{0, 3, 4, 15, 16, len(b) - 1} {
		if _, _, err := readFilter(b[:cut]); err == nil {
			t.Fatalf("a filter cut at %d bytes decoded", cut)
		}
	}
	level := func(scheme filterScheme, count uint32, size int) []byte {
		b := le.AppendUint32(nil, 1)
		b = le.AppendUint32(b, uint32(scheme))
		b = le.AppendUint32(b, count)
		b = le.AppendUint32(b, uint32(size))
		return append(b, make([]byte, size)...)
	}
	for name, bad := range map[string][]byte{
		"scheme 0":            level(0, 0, filterMinBytes),
		"scheme 3":            level(3, 0, filterMinBytes),
		"not a power of two":  level(schemeDouble, 0, 3*filterMinBytes),
		"too small":           level(schemeDouble, 0, filterMinBytes/2),
		"too large":           level(schemeDouble, 0, 2*maxFilterBytes),
		"legacy of 16 KiB":    level(schemeLegacy, 0, 2*filterMinBytes),
		"legacy with a count": level(schemeLegacy, 1, legacyFilterBits/8),
		"too many levels":     le.AppendUint32(nil, maxFilterLevels+1),
	} {
		if _, _, err := readFilter(bad); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// A digest written before the filter had levels (flag bit0, one 8 KiB
// legacy filter) still parses and merges, and its ids stay forgotten.
func TestLegacyDigest(t *testing.T) {
	bits := make([]byte, legacyFilterBits/8)
	for _, p := range legacyBits(42) {
		bits[p/8] |= 1 << (p % 8)
	}
	d := le.AppendUint32(nil, digestLegacy)
	d = le.AppendUint32(d, 1)
	d = le.AppendUint64(d, 7)
	d = le.AppendUint64(d, 30)
	d = append(d, bits...)
	if err := checkDigest(d); err != nil {
		t.Fatal(err)
	}
	var tab sessions
	tab.merge(d, 5)
	if tab.vouches(42, 1) || tab.vouches(7, 30) || !tab.vouches(7, 31) || !tab.vouches(43, 1) {
		t.Fatal("a legacy digest merged wrong")
	}
	both := bytes.Clone(d)
	le.PutUint32(both, digestLegacy|digestLevels)
	for name, bad := range map[string][]byte{
		"both flags":    both,
		"legacy cut":    d[:len(d)-1],
		"levels absent": append(le.AppendUint32(nil, digestLevels), make([]byte, 4)...),
		"no level":      append(le.AppendUint32(nil, digestLevels), make([]byte, 8)...),
	} {
		if checkDigest(bad) == nil {
			t.Errorf("%s: the digest passed", name)
		}
	}
}

// A digest that would not fit a wire frame carries its filter folded:
// smaller, holding every id.
func TestEvictedFilterShrunk(t *testing.T) {
	var f evictedFilter
	for id := uint64(1); id <= 300_000; id++ {
		f.add(id)
	}
	var other evictedFilter // two more levels of the smallest size
	for id := uint64(900_001); id <= 902_000; id++ {
		other.add(id)
	}
	f.levels = append(f.levels, other.levels[0].clone(), filterLevel{scheme: schemeDouble, bits: make([]byte, filterMinBytes)})
	f.merge(&evictedFilter{levels: []filterLevel{{scheme: schemeLegacy, bits: make([]byte, legacyFilterBits/8)}}})
	for _, max := range []int{f.encodedSize(), 300 << 10, 64 << 10, 1} {
		s := f.shrunk(max)
		switch {
		case max >= 2*(filterLevelHeaderSize+filterMinBytes)+4 && s.encodedSize() > max:
			t.Fatalf("shrunk(%d) takes %d bytes", max, s.encodedSize())
		case max < 2*(filterLevelHeaderSize+filterMinBytes)+4 && len(s.levels) != 2:
			t.Fatalf("shrunk(%d) left %d levels, want one double and the legacy one", max, len(s.levels))
		}
		mustHoldAll(t, &s, 1, 300_000)
		mustHoldAll(t, &s, 900_001, 2_000)
		if !reflect.DeepEqual(f.shrunk(f.encodedSize()), f) {
			t.Fatal("a filter that fits was changed")
		}
		t.Logf("shrunk to %d bytes (%d levels): %.3f%% false positives", s.encodedSize(), len(s.levels), 100*falsePositives(&s, 1<<40, 50_000))
	}

	var tab sessions
	for id := uint64(1); id <= maxSessions+20_000; id++ {
		tab.record(id, 1, false, id)
	}
	const frame = 80 << 10 // the clients' 64 KiB, and room for one 8 KiB level
	if full := tab.appendDigest(nil, wire.DefaultMaxFrameSize); len(full) <= frame {
		t.Fatalf("the digest takes %d bytes unshrunk: the test is off", len(full))
	}
	d := tab.appendDigest(nil, frame)
	if len(d) > frame {
		t.Fatalf("a %d-byte digest, want at most %d", len(d), frame)
	}
	if err := checkDigest(d); err != nil {
		t.Fatal(err)
	}
	var dst sessions
	dst.merge(d, 1)
	for id := uint64(1); id <= 20_000; id++ {
		if dst.vouches(id, 2) {
			t.Fatalf("the target vouches for client %d, which the source forgot", id)
		}
	}
}
