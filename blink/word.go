package blink

import (
	"fmt"
)

// Entry words (docs/transactions.md §2.1, §2.6).
//
// A tree is in legacy mode (no versions: every meganode formatted without
// Config.Versioned and every image written before versions) or in
// versioned mode with a legacy version U, kept in the meganode header
// (flagVersioned in its flags byte, U in the u64 before its tail
// version), so that it is part of the region image and of Open.
//
// In versioned mode every leaf entry of a leaf meganode has an entry word:
// a versioned extent leaf (flagVersioned) stores it after each entry's
// extent payload. Leaves written before the switch stay legacy (no words)
// until a write changes them: their entries read as MakeWord(U, false,
// false), and the first write rewrites the leaf versioned with exactly
// those words (upgradeLocked), splitting it when the larger entries no
// longer fit in one node. Pointer nodes never carry words.

// Word is a leaf entry's entry word: a version (62 bits) and two flags.
//
//	bits 0..61  version (0: the key is absent, §2.4)
//	bit  62     locked: a transaction holds the key
//	bit  63     placeholder: the entry has no record (the lock of an
//	            absent key); it is invisible to Get, Contains, Search's
//	            Found, Iter and Scan
type Word uint64

// MaxVersion is the largest version a Word holds.
const MaxVersion = 1<<62 - 1

const (
	wordLocked      Word = 1 << 62
	wordPlaceholder Word = 1 << 63

	// modeVersioned marks Tree.mode in versioned mode; the low bits are U.
	modeVersioned = 1 << 63
)

// MakeWord returns the word of a version and flags. It panics on a version
// above MaxVersion (a caller's bug: versions come from a region's clock).
func MakeWord(version uint64, locked, placeholder bool) Word {
	if version > MaxVersion {
		panic(fmt.Sprintf("blink: version %d above MaxVersion", version))
	}
	w := Word(version)
	if locked {
		w |= wordLocked
	}
	if placeholder {
		w |= wordPlaceholder
	}
	return w
}

// Version returns the word's version.
func (w Word) Version() uint64 { return uint64(w) & MaxVersion }

// Locked reports the locked flag.
func (w Word) Locked() bool { return w&wordLocked != 0 }

// Placeholder reports the placeholder flag.
func (w Word) Placeholder() bool { return w&wordPlaceholder != 0 }

func (w Word) String() string {
	s := fmt.Sprintf("v%d", w.Version())
	if w.Locked() {
		s += " locked"
	}
	if w.Placeholder() {
		s += " placeholder"
	}
	return s
}

// Versioning returns the tree's mode: versioned, and then its legacy
// version U. Safe for concurrent use.
func (t *Tree) Versioning() (versioned bool, legacy uint64) {
	m := t.mode.Load()
	return m&modeVersioned != 0, m &^ modeVersioned
}

// versionedLocked reports versioned mode. REQUIRES: t.mu held.
func (t *Tree) versionedLocked() bool { return t.mode.Load()&modeVersioned != 0 }

// SetVersioning switches the tree from legacy mode to versioned mode with
// legacy version legacy (U, in [1, MaxVersion]): the header is published
// with the mode (BeforeWrite reported); no leaf changes. From now on Put
// returns ErrNeedsWord (use PutWord), new leaves are versioned, and a
// write that changes a legacy leaf rewrites it versioned. Calling it again
// with the same U does nothing; another U returns ErrVersioning. An inner
// meganode records the mode too (its nodes never carry words).
func (t *Tree) SetVersioning(legacy uint64) error {
	if legacy < 1 || legacy > MaxVersion {
		return fmt.Errorf("legacy version %d not in [1, %d]: %w", legacy, uint64(MaxVersion), ErrVersioning)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.mode.Load(); m&modeVersioned != 0 {
		if m&^modeVersioned != legacy {
			return fmt.Errorf("versioned with legacy version %d, asked for %d: %w", m&^modeVersioned, legacy, ErrVersioning)
		}
		return nil
	}
	h := t.mu.hdr
	h[offFlags] |= flagVersioned
	h.putU64(len(h)-hdrLegacyFromEnd, legacy)
	t.mu.dirty = true
	t.flushHeaderLocked()
	t.mode.Store(modeVersioned | legacy)
	return nil
}

// wordOf returns the word of entry i of an accepted leaf copy (or a live
// leaf under the writer's lock): its own in a versioned leaf, U's in a
// legacy leaf of a versioned tree, 0 in legacy mode.
func (t *Tree) wordOf(n node, i int) Word {
	if n.versioned() {
		return n.rawWord(i)
	}
	if m := t.mode.Load(); m&modeVersioned != 0 && n.extents() {
		return Word(m &^ modeVersioned)
	}
	return 0
}

// ---- Writes ----

// needsUpgradeLocked reports whether the live leaf n must be rewritten
// versioned before a write changes it. REQUIRES: t.mu held.
func (t *Tree) needsUpgradeLocked(n node) bool {
	return n.extents() && !n.versioned() && t.versionedLocked()
}

// roomForUpgradeLocked returns ErrNeedsSplit, changing nothing, unless the
// meganode has the nodes to rewrite the legacy leaf n versioned (none when
// its entries with words fit in it; a split's cascade otherwise) plus
// extra more. The fill threshold does not apply: it is for new keys.
// REQUIRES: t.mu held.
func (t *Tree) roomForUpgradeLocked(n node, extra int) error {
	if n.usedBytes()+n.count()*(versionedPayload-extentPayload) <= len(n) {
		return nil
	}
	if inUse, capa := t.nodesInUse(), t.capacity(); inUse+t.height()+1+extra > capa {
		t.mu.upgradeRefused = true
		return fmt.Errorf("rewriting a legacy leaf versioned: %d of %d nodes in use: %w", inUse, capa, ErrNeedsSplit)
	}
	return nil
}

// upgradeLocked rewrites the legacy extent leaf at leaf versioned, every
// entry with the word MakeWord(U, false, false), and returns the leaf that
// covers key afterwards (t.mu.path describes its descent). When the
// entries with their words no longer fit in one node, the leaf splits into
// two versioned halves, published as any split (right half first) with
// the separator carried up. Should no split point fit (not seen for the
// node sizes allowed), the leaf first splits as a legacy leaf and the half
// covering key is rewritten in turn. The caller flushes the header.
// REQUIRES: t.mu held; t.mu.path from descendLocked(key); room checked
// with roomForUpgradeLocked.
func (t *Tree) upgradeLocked(leaf Ptr, key []byte) (Ptr, error) {
	_, u := t.Versioning()
	word := MakeWord(u, false, false)
	for {
		n := t.nodeBytes(leaf)
		if !n.extents() || n.versioned() {
			return leaf, nil
		}
		old := t.mu.tmp
		copy(old, n)
		c := old.count()
		ents := t.mu.splitBuf[:0]
		words := t.mu.words
		for j := 0; j < c; j++ {
			pl := words[j*versionedPayload : (j+1)*versionedPayload]
			copy(pl, old.payload(j))
			le.PutUint64(pl[extentPayload:], uint64(word))
			ents = append(ents, entryRef{old.key(j), pl})
		}
		t.mu.splitBuf = ents
		min, max := old.minKey(), old.maxKey()
		flags := old.flags() | flagVersioned
		if entsFit(ents, len(old), min, max) {
			img := t.mu.scratch
			initNode(img, kindTree, 0, flags, min, max, old.rightLink())
			for _, e := range ents {
				img.appendEntry(e.key, e.payload)
			}
			t.publish(leaf, img)
			return leaf, nil
		}
		if t.nodesInUse()+t.height()+1 > t.capacity() {
			t.mu.upgradeRefused = true
			return 0, fmt.Errorf("rewriting a legacy leaf versioned: all %d nodes in use: %w", t.capacity(), ErrNeedsSplit)
		}
		k := splitPoint(ents, len(old), min, max)
		if k < 0 {
			ents = ents[:0]
			for j := 0; j < c; j++ {
				ents = append(ents, entryRef{old.key(j), old.payload(j)})
			}
			flags = old.flags()
			k = chooseSplit(ents, len(old), min, max)
		}
		sep, right := t.writeSplitLocked(leaf, old, ents, k, flags)
		t.carryLocked(0, leaf, sep, right, false)
		var err error
		if leaf, err = t.descendLocked(key); err != nil {
			return 0, err
		}
	}
}

// writableLeafLocked descends to the leaf covering key for a write in a
// leaf meganode: it checks the frozen range, and returns the leaf and
// whether key is in it (and is a placeholder).
func (t *Tree) leafForWriteLocked(key []byte) (leaf Ptr, i int, found bool, err error) {
	if t.frozenLocked(key) {
		return 0, 0, false, t.errFrozen(key)
	}
	if leaf, err = t.descendLocked(key); err != nil {
		return 0, 0, false, err
	}
	i, found = t.nodeBytes(leaf).lowerBound(key)
	return leaf, i, found, nil
}

// checkWordWrite is the common validation of PutWord and PutPlaceholder.
func (t *Tree) checkWordWrite(key []byte) error {
	if err := t.checkKey(key); err != nil {
		return err
	}
	if t.leafKind != flagExtents {
		return fmt.Errorf("entry word in an inner meganode: %w", ErrKeyOutOfRange)
	}
	return nil
}

// PutWord is Put in versioned mode: it inserts key with value, or replaces
// the value of an existing key or the placeholder of an absent one, and
// the entry's word becomes w (its placeholder flag cleared: the entry has
// a record; its version must be at least 1, else ErrNeedsWord). In legacy
// mode it returns ErrNotVersioned. A legacy leaf is rewritten versioned
// first (upgradeLocked); that rewrite may split the leaf, so a write of an
// existing key may then need nodes: it returns ErrNeedsSplit, changing
// nothing, only when the meganode has none left for it (the fill
// threshold stays a rule for new keys, which return ErrNeedsSplit as with
// Put). Other errors as Put.
func (t *Tree) PutWord(key, value []byte, w Word) error {
	if err := t.checkWordWrite(key); err != nil {
		return err
	}
	if len(value) > t.opts.MaxValueSize {
		return fmt.Errorf("value of %d bytes, limit %d: %w", len(value), t.opts.MaxValueSize, ErrValueTooLarge)
	}
	w &^= wordPlaceholder
	if w.Version() == 0 {
		return fmt.Errorf("put of %q with version 0: %w", key, ErrNeedsWord)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.versionedLocked() {
		return fmt.Errorf("put of %q with a word: %w", key, ErrNotVersioned)
	}
	leaf, i, found, err := t.leafForWriteLocked(key)
	if err != nil {
		return err
	}
	ln := t.nodeBytes(leaf)
	if !found {
		if err := t.roomForInsertLocked(); err != nil {
			return err
		}
	}
	upgrade := t.needsUpgradeLocked(ln)
	if upgrade {
		extra := 0
		if !found {
			extra = t.height() + 2 // the insert's cascade, after a root growth
		}
		if err := t.roomForUpgradeLocked(ln, extra); err != nil {
			return err
		}
	}
	ext, n, crc, err := t.writeExtentLocked(key, value)
	if err != nil {
		return err
	}
	defer t.flushHeaderLocked()
	if upgrade {
		if leaf, err = t.upgradeLocked(leaf, key); err != nil {
			t.ext.Free(ext.Offset(), roundUp8(n))
			return err
		}
		ln = t.nodeBytes(leaf)
		i, found = ln.lowerBound(key)
	}
	payload := t.mu.payload[:]
	le.PutUint64(payload[0:], uint64(ext))
	le.PutUint32(payload[8:], uint32(n))
	le.PutUint64(payload[12:], crc)
	le.PutUint64(payload[extentPayload:], uint64(w))
	if found {
		wasPlaceholder := ln.placeholder(i)
		old, oldLen, _ := ln.extent(i)
		img := t.mu.scratch
		copy(img, ln)
		copy(img.payload(i), payload)
		t.publish(leaf, img)
		if !wasPlaceholder {
			t.ext.Free(old.Offset(), roundUp8(oldLen))
		}
		return nil
	}
	t.insertLocked(0, leaf, i, key, payload, false)
	return nil
}

// PutPlaceholder inserts a placeholder for key: an entry without a record
// whose word is w with the placeholder flag set (whatever w says), for the
// lock of an absent key. It takes room and counts for the fill and for
// splits like any entry, moves with its word in meganode splits, and is
// invisible to Get, GetWord, Contains, Iter and Scan; Search reports it
// with Found false and Result.Word set, View with Word(i).Placeholder().
// PutWord over it gives the key a record; Delete removes it. A placeholder
// already there gets word w; a key with a record returns ErrKeyExists.
// Versioned mode only (ErrNotVersioned); other errors as PutWord (a new
// placeholder is a new key for ErrNeedsSplit).
func (t *Tree) PutPlaceholder(key []byte, w Word) error {
	if err := t.checkWordWrite(key); err != nil {
		return err
	}
	w |= wordPlaceholder
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.versionedLocked() {
		return fmt.Errorf("placeholder for %q: %w", key, ErrNotVersioned)
	}
	leaf, i, found, err := t.leafForWriteLocked(key)
	if err != nil {
		return err
	}
	ln := t.nodeBytes(leaf)
	if found {
		if !ln.placeholder(i) {
			return fmt.Errorf("placeholder for %q, which has a record: %w", key, ErrKeyExists)
		}
		t.setWordLocked(leaf, i, w)
		return nil
	}
	if err := t.roomForInsertLocked(); err != nil {
		return err
	}
	defer t.flushHeaderLocked()
	if t.needsUpgradeLocked(ln) {
		if err := t.roomForUpgradeLocked(ln, t.height()+2); err != nil {
			return err
		}
		if leaf, err = t.upgradeLocked(leaf, key); err != nil {
			return err
		}
		i, _ = t.nodeBytes(leaf).lowerBound(key)
	}
	payload := t.mu.payload[:]
	clear(payload)
	le.PutUint64(payload[extentPayload:], uint64(w))
	t.insertLocked(0, leaf, i, key, payload, false)
	return nil
}

// SetWord changes the word of key's entry to w and nothing else: the
// entry keeps its record, or stays a placeholder (w's placeholder flag is
// ignored: the entry's own is kept). A record's word needs a version of 1
// or more (ErrNeedsWord). The leaf is published with the node version
// protocol (a word equal to the current one publishes nothing). ErrNotFound
// if key has no entry; ErrNotVersioned in legacy mode; a legacy leaf is
// rewritten versioned first, which may return ErrNeedsSplit as PutWord
// does for an existing key.
func (t *Tree) SetWord(key []byte, w Word) error {
	if err := t.checkWordWrite(key); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.versionedLocked() {
		return fmt.Errorf("word of %q: %w", key, ErrNotVersioned)
	}
	leaf, i, found, err := t.leafForWriteLocked(key)
	if err != nil {
		return err
	}
	if !found {
		return ErrNotFound
	}
	ln := t.nodeBytes(leaf)
	if ln.placeholder(i) {
		w |= wordPlaceholder
	} else if w &^= wordPlaceholder; w.Version() == 0 {
		return fmt.Errorf("word of %q with version 0: %w", key, ErrNeedsWord)
	}
	if t.needsUpgradeLocked(ln) {
		if err := t.roomForUpgradeLocked(ln, 0); err != nil {
			return err
		}
		defer t.flushHeaderLocked()
		if leaf, err = t.upgradeLocked(leaf, key); err != nil {
			return err
		}
		i, _ = t.nodeBytes(leaf).lowerBound(key)
	}
	t.setWordLocked(leaf, i, w)
	return nil
}

// setWordLocked publishes entry i of the versioned leaf at leaf with word
// w, unless it has it already. REQUIRES: t.mu held.
func (t *Tree) setWordLocked(leaf Ptr, i int, w Word) {
	ln := t.nodeBytes(leaf)
	if ln.rawWord(i) == w {
		return
	}
	img := t.mu.scratch
	copy(img, ln)
	le.PutUint64(img.payload(i)[extentPayload:], uint64(w))
	t.publish(leaf, img)
}

// ---- Reads ----

// GetWord is Get that also returns the entry's word: its own in a
// versioned leaf, MakeWord(U, false, false) for a legacy leaf's entry in
// versioned mode, 0 in legacy mode. A placeholder is ErrNotFound (Search
// shows it). With enough capacity in dst it does not allocate.
func (t *Tree) GetWord(key, dst []byte) ([]byte, Word, error) {
	return t.get(key, dst)
}

// Word returns the current entry's word (as GetWord), 0 when the iterator
// is not at an entry or in an inner meganode. After a Value that had to
// read the key again (its record changed since the leaf was copied), it is
// the word read with that value.
func (it *Iter) Word() Word {
	if !it.valid {
		return 0
	}
	if it.rereadSet {
		return it.reread
	}
	return it.t.wordOf(it.leaf, it.idx)
}

// ScanWords is Scan that also passes each entry's word (as GetWord).
// Placeholders are skipped.
func (t *Tree) ScanWords(o ScanOptions, fn func(key, value []byte, w Word) bool) error {
	return t.scan(o, fn)
}

// RoomForWrites reports, changing nothing, whether writes of keys (puts
// where put[i], else deletes) could all apply now without one being
// refused for want of room or by a split: ErrFrozen for a key in a range
// a meganode split moves, ErrKeyOutOfRange for a key outside the
// meganode, ErrNeedsSplit unless the meganode is below its fill threshold
// (when a put adds a key) and has nodes left for every write's worst
// case (an insert's cascade for each new key, a rewrite of a legacy leaf
// for each write into one). The apply of a transaction checks it before
// its first write, so that it applies whole or not at all. Versioned mode
// only (ErrNotVersioned).
func (t *Tree) RoomForWrites(keys [][]byte, put []bool) error {
	if t.leafKind != flagExtents {
		return fmt.Errorf("writes into an inner meganode: %w", ErrKeyOutOfRange)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.versionedLocked() {
		return fmt.Errorf("transaction writes: %w", ErrNotVersioned)
	}
	need, inserts := 0, 0
	for i, key := range keys {
		if err := t.checkKey(key); err != nil {
			return err
		}
		leaf, _, found, err := t.leafForWriteLocked(key)
		if err != nil {
			return err
		}
		if put[i] && !found {
			inserts++
			need += t.height() + 2
		}
		if t.needsUpgradeLocked(t.nodeBytes(leaf)) {
			need += t.height() + 2
		}
	}
	if inserts > 0 {
		if err := t.roomForInsertLocked(); err != nil {
			return err
		}
	}
	if inUse, capa := t.nodesInUse(), t.capacity(); inUse+need > capa {
		return fmt.Errorf("%d writes need up to %d nodes, %d of %d in use: %w", len(keys), need, inUse, capa, ErrNeedsSplit)
	}
	return nil
}
