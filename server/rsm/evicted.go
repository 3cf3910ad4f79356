package rsm

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
)

// The evicted filter holds the ids of the clients a session table forgot
// whole (sessions.go): a retry of such a client is never vouched for. It is
// replicated state, so everything here is decided by the ids added and the
// filters merged, in log order.
//
// It is a scalable Bloom filter (Almeida, Baquero, Preguiça and Hutchison,
// "Scalable Bloom Filters", 2007): a list of levels, each a Bloom filter
// of its own. An id goes into the last level until that level holds its
// capacity (filterBitsPerID bits per id); then a level twice the size of
// the largest is added. With filterHashes probes at that load a level
// answers a false positive for about 1 id in 2,200 (4.6e-4), so the whole
// filter errs for at most levels × 4.6e-4 of the ids it never held: a
// region can forget clients without end (one-shot clients such as
// `cellctl put` each use a new id) and its retries stay verifiable.
//
// Memory is bounded: the levels of one region add up to at most
// maxFilterBytes (2 MiB: 8 KiB, 16 KiB, ... 1 MiB hold 1,044,480 ids
// within capacity, erring for 0.37% of the others), so that a split's
// digest, which carries the filter, stays inside a default wire frame
// (one made smaller gets a folded copy: shrunk). Past that the largest
// level takes the ids beyond its capacity and the false positives grow:
// 3.2% at 1.5 million ids, 18.5% at 2 million, 65% at 3 million (the one
// 8 KiB level this replaces erred for 5% at 10,000 ids and 51% at
// 35,000; TestEvictedFilterBound).
//
// A level of the legacy scheme is the 8 KiB, 3-probe filter of snapshot
// state version 2 and of older digests: it is read, merged with another
// legacy level, and never added to.
const (
	filterMinBytes  = 8 << 10
	maxFilterBytes  = 2 << 20
	filterBitsPerID = 16
	filterHashes    = 11
	maxFilterLevels = 32

	legacyFilterBits   = 1 << 16 // 8 KiB
	legacyFilterHashes = 3
)

// filterScheme is how a level maps an id to bits.
type filterScheme uint32

const (
	// schemeLegacy: legacyFilterHashes 16-bit slices of one mix of the
	// id, modulo legacyFilterBits.
	schemeLegacy filterScheme = 1
	// schemeDouble: filterHashes probes h1 + i·h2 (double hashing,
	// Kirsch and Mitzenmacher) modulo the level's bits, a power of two.
	// A level folded to half its size (its halves ORed) holds the same
	// ids: positions modulo m, taken modulo m/2, are the positions
	// modulo m/2.
	schemeDouble filterScheme = 2
)

// evictedFilter is the filter; the zero value is empty.
type evictedFilter struct {
	levels []filterLevel
}

// filterLevel is one Bloom filter of the list.
type filterLevel struct {
	scheme filterScheme
	count  uint32 // ids added (saturating); legacy: not known, not used
	bits   []byte // a power of two of bytes
}

// capacity is the number of ids the level takes (legacy: none).
func (l *filterLevel) capacity() uint32 {
	if l.scheme != schemeDouble {
		return 0
	}
	return uint32(len(l.bits) * 8 / filterBitsPerID)
}

// add sets the bits of id.
func (l *filterLevel) add(id uint64) {
	m := uint64(len(l.bits))*8 - 1
	h1, h2 := doubleHashes(id)
	for i := range uint64(filterHashes) {
		p := (h1 + i*h2) & m
		l.bits[p/8] |= 1 << (p % 8)
	}
	if l.count < math.MaxUint32 {
		l.count++
	}
}

// has reports whether every bit of id is set.
func (l *filterLevel) has(id uint64) bool {
	if l.scheme == schemeLegacy {
		for _, p := range legacyBits(id) {
			if l.bits[p/8]&(1<<(p%8)) == 0 {
				return false
			}
		}
		return true
	}
	m := uint64(len(l.bits))*8 - 1
	h1, h2 := doubleHashes(id)
	for i := range uint64(filterHashes) {
		p := (h1 + i*h2) & m
		if l.bits[p/8]&(1<<(p%8)) == 0 {
			return false
		}
	}
	return true
}

// foldTo returns the level's bits folded down to n bytes (a power of
// two, at most len(l.bits)).
func (l *filterLevel) foldTo(n int) []byte {
	out := slices.Clone(l.bits[:n])
	for off := n; off < len(l.bits); off += n {
		for i, b := range l.bits[off : off+n] {
			out[i] |= b
		}
	}
	return out
}

func (l filterLevel) clone() filterLevel {
	l.bits = slices.Clone(l.bits)
	return l
}

// mix64 is splitmix64's finaliser: ids a client chooses still spread.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// doubleHashes returns the two hashes of id's probes (h2 odd, so that the
// probes of one id are distinct modulo any power of two above them).
func doubleHashes(id uint64) (h1, h2 uint64) {
	h1 = mix64(id)
	return h1, mix64(h1) | 1
}

// legacyBits returns the legacy scheme's bits of id.
func legacyBits(id uint64) [legacyFilterHashes]uint32 {
	z := mix64(id)
	var out [legacyFilterHashes]uint32
	for i := range out {
		out[i] = uint32(z>>(16*i)) % legacyFilterBits
	}
	return out
}

// empty reports whether the filter holds no level.
func (f *evictedFilter) empty() bool { return len(f.levels) == 0 }

// has reports whether id may have been added.
func (f *evictedFilter) has(id uint64) bool {
	for i := range f.levels {
		if f.levels[i].has(id) {
			return true
		}
	}
	return false
}

// add adds id: to the last level while it has room, else to a new level
// twice the size of the largest, else (the bound reached) to the largest.
func (f *evictedFilter) add(id uint64) {
	if n := len(f.levels); n > 0 {
		if last := &f.levels[n-1]; last.count < last.capacity() {
			last.add(id)
			return
		}
	}
	size, largest := filterMinBytes, -1
	for i := range f.levels {
		if l := &f.levels[i]; l.scheme == schemeDouble && (largest < 0 || len(l.bits) > len(f.levels[largest].bits)) {
			largest = i
		}
	}
	if largest >= 0 {
		size = 2 * len(f.levels[largest].bits)
	}
	if f.bytes()+size <= maxFilterBytes && len(f.levels) < maxFilterLevels || largest < 0 {
		f.levels = append(f.levels, filterLevel{scheme: schemeDouble, bits: make([]byte, size)})
		f.levels[len(f.levels)-1].add(id)
		return
	}
	f.levels[largest].add(id)
}

// bytes is the size of the filter's bits.
func (f *evictedFilter) bytes() int {
	n := 0
	for i := range f.levels {
		n += len(f.levels[i].bits)
	}
	return n
}

// merge makes f hold the ids of g too. A level f has already is skipped
// (a source that splits to the same target again sends the levels it
// sent before); legacy levels are ORed into f's legacy level; another
// level is appended while the bound allows it, and folded into f's level
// of its size or the nearest smaller one (ORed) when it does not.
func (f *evictedFilter) merge(g *evictedFilter) {
	for i := range g.levels {
		gl := &g.levels[i]
		if slices.ContainsFunc(f.levels, func(l filterLevel) bool {
			return l.scheme == gl.scheme && bytes.Equal(l.bits, gl.bits)
		}) {
			continue
		}
		if gl.scheme == schemeLegacy {
			if j := slices.IndexFunc(f.levels, func(l filterLevel) bool { return l.scheme == schemeLegacy }); j >= 0 {
				orInto(f.levels[j].bits, gl.bits)
				continue
			}
			f.levels = append(f.levels, gl.clone())
			continue
		}
		if f.bytes()+len(gl.bits) <= maxFilterBytes && len(f.levels) < maxFilterLevels {
			f.levels = append(f.levels, gl.clone())
			continue
		}
		f.fold(gl)
	}
}

// fold ORs level g into f's double level of g's size or the nearest
// smaller one, folding g down to it; if f has none that small, f's
// smallest double level is folded down to g's size first.
func (f *evictedFilter) fold(g *filterLevel) {
	best, smallest := -1, -1
	for i := range f.levels {
		l := &f.levels[i]
		if l.scheme != schemeDouble {
			continue
		}
		if len(l.bits) <= len(g.bits) && (best < 0 || len(l.bits) > len(f.levels[best].bits)) {
			best = i
		}
		if smallest < 0 || len(l.bits) < len(f.levels[smallest].bits) {
			smallest = i
		}
	}
	if best < 0 {
		// merge appends while f holds no double level (f.bytes() is at
		// most a legacy level's then), so smallest is set here.
		l := &f.levels[smallest]
		l.bits = l.foldTo(len(g.bits))
		best = smallest
	}
	l := &f.levels[best]
	orInto(l.bits, g.foldTo(len(l.bits)))
	l.count = uint32(min(uint64(l.count)+uint64(g.count), math.MaxUint32))
}

// encodedSize is the size of f's encoding (appendTo).
func (f *evictedFilter) encodedSize() int {
	n := 4
	for i := range f.levels {
		n += filterLevelHeaderSize + len(f.levels[i].bits)
	}
	return n
}

// shrunk returns a copy of f whose encoding takes at most max bytes where
// it can: the largest double level folded to half its size, and ORed
// with a level of the size it reaches, until it fits or one level of
// filterMinBytes is left. It holds every id f holds, with more false
// positives.
func (f *evictedFilter) shrunk(max int) evictedFilter {
	c := f.clone()
	for c.encodedSize() > max {
		largest := -1
		for i := range c.levels {
			if l := &c.levels[i]; l.scheme == schemeDouble && len(l.bits) > filterMinBytes &&
				(largest < 0 || len(l.bits) > len(c.levels[largest].bits)) {
				largest = i
			}
		}
		if largest < 0 {
			// Every double level is of the smallest size: OR them into
			// the first.
			first, n := -1, len(c.levels)
			for j := 0; j < len(c.levels); j++ {
				if o := &c.levels[j]; o.scheme == schemeDouble {
					if first < 0 {
						first = j
						continue
					}
					f := &c.levels[first]
					orInto(f.bits, o.bits)
					f.count = uint32(min(uint64(f.count)+uint64(o.count), math.MaxUint32))
					c.levels = slices.Delete(c.levels, j, j+1)
					j--
				}
			}
			if len(c.levels) == n {
				break // nothing left to fold
			}
			continue
		}
		l := &c.levels[largest]
		l.bits = l.foldTo(len(l.bits) / 2)
		for j := range c.levels {
			if o := &c.levels[j]; j != largest && o.scheme == schemeDouble && len(o.bits) == len(l.bits) {
				orInto(o.bits, l.bits)
				o.count = uint32(min(uint64(o.count)+uint64(l.count), math.MaxUint32))
				c.levels = slices.Delete(c.levels, largest, largest+1)
				break
			}
		}
	}
	return c
}

func orInto(dst, src []byte) {
	for i, b := range src {
		dst[i] |= b
	}
}

func (f *evictedFilter) clone() evictedFilter {
	if f.levels == nil {
		return evictedFilter{}
	}
	c := evictedFilter{levels: make([]filterLevel, len(f.levels))}
	for i, l := range f.levels {
		c.levels[i] = l.clone()
	}
	return c
}

// The filter's encoding (snapshot state version 3 on, and digests flagged
// digestLevels), little-endian:
//
//	0 level count u32 (at most maxFilterLevels)
//	then per level: 0 scheme u32   4 count u32   8 byte length u32
//	  12 the bits (legacy: legacyFilterBits/8 bytes; double: a power of
//	  two from filterMinBytes to maxFilterBytes)
const filterLevelHeaderSize = 12

func (f *evictedFilter) appendTo(b []byte) []byte {
	b = le.AppendUint32(b, uint32(len(f.levels)))
	for _, l := range f.levels {
		b = le.AppendUint32(b, uint32(l.scheme))
		b = le.AppendUint32(b, l.count)
		b = le.AppendUint32(b, uint32(len(l.bits)))
		b = append(b, l.bits...)
	}
	return b
}

// readFilter decodes a filter from the head of b and returns the rest of
// b after it. The bits of the levels it returns alias b.
func readFilter(b []byte) (evictedFilter, []byte, error) {
	r := bytes.NewReader(b)
	f, err := decodeFilter(func(n int) ([]byte, error) {
		if r.Len() < n {
			return nil, io.ErrUnexpectedEOF
		}
		off := len(b) - r.Len()
		_, _ = r.Seek(int64(n), io.SeekCurrent)
		return b[off : off+n : off+n], nil
	})
	if err != nil {
		return evictedFilter{}, nil, err
	}
	return f, b[len(b)-r.Len():], nil
}

// readFilterFrom decodes a filter from r.
func readFilterFrom(r io.Reader) (evictedFilter, error) {
	return decodeFilter(func(n int) ([]byte, error) {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	})
}

// decodeFilter decodes a filter whose bytes next(n) returns in order.
func decodeFilter(next func(n int) ([]byte, error)) (evictedFilter, error) {
	bad := func(what string) (evictedFilter, error) {
		return evictedFilter{}, fmt.Errorf("evicted filter: %s", what)
	}
	h, err := next(4)
	if err != nil {
		return bad("truncated")
	}
	n := le.Uint32(h)
	if n > maxFilterLevels {
		return bad(fmt.Sprintf("%d levels", n))
	}
	var f evictedFilter
	total := 0
	for i := range n {
		h, err := next(filterLevelHeaderSize)
		if err != nil {
			return bad(fmt.Sprintf("level %d truncated", i))
		}
		l := filterLevel{scheme: filterScheme(le.Uint32(h)), count: le.Uint32(h[4:])}
		size := le.Uint32(h[8:])
		switch {
		case l.scheme == schemeLegacy && size == legacyFilterBits/8 && l.count == 0:
		case l.scheme == schemeDouble && size >= filterMinBytes && size <= maxFilterBytes && bits.OnesCount32(size) == 1:
			total += int(size)
		default:
			return bad(fmt.Sprintf("level %d: scheme %d, count %d, %d bytes", i, l.scheme, l.count, size))
		}
		if total > maxFilterBytes {
			return bad(fmt.Sprintf("%d bytes of levels", total))
		}
		if l.bits, err = next(int(size)); err != nil {
			return bad(fmt.Sprintf("level %d truncated", i))
		}
		f.levels = append(f.levels, l)
	}
	return f, nil
}

// legacyFilter returns a filter of one legacy level with bits b (a copy).
func legacyFilter(b []byte) evictedFilter {
	return evictedFilter{levels: []filterLevel{{scheme: schemeLegacy, bits: slices.Clone(b)}}}
}
