package blink

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/btree"
)

// Model-based random test: random operations on a Tree and on a google/btree
// oracle, compared after every operation (STYLE §8: "random operations
// against a google/btree oracle, seed logged and replayable").
//
// Each seed picks its configuration from seed%4 (see modelConfigFor), so a
// failure replays with
//
//	go test -run TestModel ./blink/ -blink.seed=N [-blink.ops=M]
//
// It checks the paper's B-link tree (§2.2: "A search for a key follows child
// pointers and, if necessary, right-link pointers until the correct leaf node
// is reached. Range queries are implemented by following right links at the
// leaf level."), with splits everywhere the key distribution puts them, and
// deletes that remove the key from its leaf node and merge leaves (and
// their parents) left under a quarter full with a neighbour (merge.go),
// in ordinary phases and in delete-heavy phases (purge) that delete 90%
// of the keys at once.

var (
	modelSeedFlag = flag.Uint64("blink.seed", 0, "TestModel: replay this seed only (0: four fresh seeds)")
	modelOpsFlag  = flag.Int("blink.ops", 0, "TestModel: operations per seed (0: default)")
)

const (
	modelCheckEvery  = 50_000 // ops between invariant checks
	modelPhaseLength = 20_000 // ops per grow or shrink phase
)

// Model modes: a seed's run is in legacy mode throughout, versioned from
// the format, or switches from legacy to versioned a third of the way in
// (legacy leaves then read as U and are rewritten versioned when written).
const (
	modelLegacy = iota
	modelVersioned
	modelSwitch
)

var modeNames = [...]string{"legacy", "versioned", "legacy then versioned"}

// modelModeFor returns the mode of a seed; the four default seeds of a
// run (consecutive, one per configuration) cover all three modes.
func modelModeFor(seed uint64) int { return int((seed>>2 + seed%4) % 3) }

// modelConfig is the tree a seed runs against.
type modelConfig struct {
	nodeSize     int
	meganodeSize uint64
	maxKeys      int  // no new keys above this many live keys
	mustFill     bool // meganode small enough that inserts must hit ErrNeedsSplit
	ops          int  // default operations for this configuration
}

// modelConfigFor returns the configuration of a seed. The four default
// seeds cover the four configurations, and their ops add up to 1,000,000
// per run. Under -race an operation costs about one atomic load per word of
// every node it copies, so the 4096-byte configuration gets fewer.
func modelConfigFor(seed uint64) modelConfig {
	switch seed % 4 {
	case 0:
		return modelConfig{nodeSize: 512, meganodeSize: 8 << 20, maxKeys: 4000, ops: 300_000}
	case 1:
		return modelConfig{nodeSize: 1024, meganodeSize: 8 << 20, maxKeys: 6000, ops: 300_000}
	case 2:
		return modelConfig{nodeSize: 4096, meganodeSize: 16 << 20, maxKeys: 8000, ops: 120_000}
	default:
		// 512 nodes of 512 bytes: full after a few thousand keys.
		return modelConfig{nodeSize: 512, meganodeSize: 512 * 512, maxKeys: 20000, mustFill: true, ops: 280_000}
	}
}

func TestModel(t *testing.T) {
	var seeds []uint64
	if *modelSeedFlag != 0 {
		seeds = []uint64{*modelSeedFlag}
	} else {
		// Fresh seeds every run, one per configuration (seed%4).
		base := uint64(time.Now().UnixNano()) &^ 3
		for i := uint64(0); i < 4; i++ {
			seeds = append(seeds, base+i)
		}
	}
	for _, seed := range seeds {
		ops := modelConfigFor(seed).ops
		switch {
		case *modelOpsFlag > 0:
			ops = *modelOpsFlag
		case testing.Short():
			ops /= 10
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			// The seeds are independent trees: use both cores.
			t.Parallel()
			runModel(t, seed, ops)
		})
	}
}

// modelItem is an entry of the oracle: a key with its value, or a
// placeholder (ph, no value), and its word as stored (0: an entry written
// in legacy mode, which reads as U once the tree is versioned).
type modelItem struct {
	key, value string
	word       Word
	ph         bool
}

func modelLess(a, b modelItem) bool { return a.key < b.key }

type modelRun struct {
	t      *testing.T
	seed   uint64
	cfg    modelConfig
	r      *rand.Rand
	tr     *Tree
	ext    *testExtents
	gen    *keyGen
	oracle *btree.BTreeG[modelItem]
	keys   []string       // live keys, for picking one at random
	pos    map[string]int // index of each live key in keys
	values []byte         // values are slices of this
	op     int            // operations done
	buf    []byte

	// A run of sequential keys being inserted (leftmost or rightmost splits
	// inside a subtree, or of the whole tree).
	run struct {
		base []byte
		next uint32
		left int
		down bool
	}
	low, high uint32 // next counters of the runs under 0x00 and 0xff

	// Versions (word.go): the mode of the run (modelMode), whether the
	// tree is versioned now, its legacy version, the op at which a
	// switching run switches, the last version given, and how many
	// oracle entries are placeholders.
	mode      int
	versioned bool
	u         uint64
	switchAt  int
	clock     uint64
	ph        int

	full       bool // an insert returned ErrNeedsSplit
	needsSplit int  // inserts refused with ErrNeedsSplit
	snapshots  int  // refused inserts checked byte for byte
	counts     map[string]int
}

func runModel(t *testing.T, seed uint64, ops int) {
	runModelFrom(t, seed, ops, 64<<20, rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// runModelFrom is runModel with its decisions drawn from src and extents
// of extentBytes.
func runModelFrom(t *testing.T, seed uint64, ops int, extentBytes uint64, src rand.Source) {
	cfg := modelConfigFor(seed)
	mode := modelModeFor(seed)
	t.Logf("seed %d: node size %d, meganode %d KiB, %s, %d ops (replay: go test -run TestModel ./blink/ -blink.seed=%d)",
		seed, cfg.nodeSize, cfg.meganodeSize>>10, modeNames[mode], ops, seed)
	start := time.Now()
	var legacy uint64
	if mode == modelVersioned {
		legacy = 1
	}
	tr, ext := newTestTree(t, testTreeOpts{nodeSize: cfg.nodeSize, meganodeSize: cfg.meganodeSize, extentBytes: extentBytes, legacy: legacy})
	r := rand.New(src)
	m := &modelRun{
		t: t, seed: seed, cfg: cfg, r: r, tr: tr, ext: ext,
		gen:    newKeyGen(r, tr.MaxKeySize()),
		oracle: btree.NewG(16, modelLess),
		pos:    map[string]int{},
		counts: map[string]int{},
		low:    1<<32 - 1,
		mode:   mode,
	}
	switch mode {
	case modelVersioned:
		m.versioned, m.u, m.clock = true, 1, 1
	case modelSwitch:
		m.switchAt = ops / 3
	}
	// The bytes values are cut from come from a stream of their own, so
	// that r's draws (FuzzModel's input) all go to decisions.
	vr := rand.New(rand.NewPCG(seed, 0x76616c756573))
	m.values = make([]byte, 8<<10)
	for i := range m.values {
		m.values[i] = byte(vr.Uint32())
	}
	purged := 0
	for next := modelCheckEvery; m.op < ops; {
		if m.mode == modelSwitch && !m.versioned && m.op >= m.switchAt {
			m.switchVersioned()
		}
		// A delete-heavy phase (merges, merge.go) at the start of every
		// third phase: 90% of the keys deleted in random order; the grow
		// phases after it insert again into the freed nodes.
		if p := m.op / modelPhaseLength; p%3 == 1 && p > purged {
			purged = p
			m.purge()
		}
		m.step()
		if m.op >= next {
			m.checkAll()
			next += modelCheckEvery
		}
	}
	m.checkAll()
	if cfg.mustFill && ops >= cfg.ops && m.needsSplit == 0 {
		t.Fatalf("seed %d: small meganode never returned ErrNeedsSplit", seed)
	}
	if ops >= cfg.ops && !cfg.mustFill {
		kinds := []string{"split left edge", "split right edge", "split middle"}
		if cfg.nodeSize <= 1024 {
			// 4096-byte leaves take too many keys per split to be sure.
			kinds = append(kinds, "split left edge (leftmost leaf)", "split right edge (rightmost leaf)")
		}
		for _, kind := range kinds {
			n := m.counts[kind]
			if !strings.Contains(kind, "(") {
				for _, where := range []string{" (leftmost leaf)", " (rightmost leaf)", " (root leaf)"} {
					n += m.counts[kind+where]
				}
			}
			if n == 0 {
				t.Errorf("seed %d: no %s in %d ops: the key distribution no longer exercises it", seed, kind, ops)
			}
		}
	}
	if m.mode == modelSwitch && ops >= 100 && !m.versioned {
		t.Fatalf("seed %d: never switched to versioned mode", seed)
	}
	t.Logf("seed %d: %d ops in %v: %d keys, height %d, %d nodes in use, %d inserts refused (%d checked byte for byte), ops %v",
		seed, m.op, time.Since(start).Round(time.Millisecond), m.records(), tr.height(), tr.nodesInUse(),
		m.needsSplit, m.snapshots, m.counts)
}

func (m *modelRun) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("seed %d op %d: %s\nreplay: go test -run TestModel ./blink/ -blink.seed=%d -blink.ops=%d",
		m.seed, m.op, fmt.Sprintf(format, args...), m.seed, m.op+1)
}

// step runs one random operation (or one iterator session of several).
func (m *modelRun) step() {
	r := m.r
	grow := (m.op/modelPhaseLength)%2 == 0
	// Weights per thousand: new key, update, delete, delete missing, get,
	// contains, scan, iterator session, invalid key; the rest is get.
	wNew, wUpd, wDel := 250, 150, 80
	if !grow {
		wNew, wDel = 120, 200
	}
	if m.full {
		// Inserts keep failing; keep the tree populated so updates,
		// deletes and reads still work on a full meganode.
		wNew, wUpd, wDel = 100, 300, 2
	}
	x := r.IntN(1000)
	switch {
	case x < wNew:
		m.putNew()
	case x < wNew+wUpd:
		m.update()
	case x < wNew+wUpd+wDel:
		m.deleteExisting()
	case x < wNew+wUpd+wDel+15:
		m.deleteMissing()
	case x < wNew+wUpd+wDel+75:
		m.contains()
	case x < wNew+wUpd+wDel+87:
		m.scan()
	case x < wNew+wUpd+wDel+112:
		m.iterSession()
	case x < wNew+wUpd+wDel+114:
		m.invalidKey()
	default:
		m.get()
	}
}

func (m *modelRun) count(name string) { m.counts[name]++ }

// ---- Keys and values ----

// keyGen draws keys of 1..maxKey bytes: a prefix from a tree of prefixes
// chosen with a Zipf distribution (so many keys share long prefixes), then a
// short suffix over a small alphabet with 0x00 and 0xff (so keys bunch up at
// both ends of every prefix group and of the whole key space).
type keyGen struct {
	r        *rand.Rand
	maxKey   int
	prefixes [][]byte
	zipf     *rand.Zipf
}

func newKeyGen(r *rand.Rand, maxKey int) *keyGen {
	g := &keyGen{r: r, maxKey: maxKey}
	g.prefixes = append(g.prefixes, nil)
	for len(g.prefixes) < 64 {
		parent := g.prefixes[r.IntN(len(g.prefixes))]
		p := append(append([]byte{}, parent...), g.bytes(1+r.IntN(max(1, maxKey/8)))...)
		if len(p) >= maxKey {
			p = p[:maxKey-1]
		}
		g.prefixes = append(g.prefixes, p)
	}
	g.zipf = rand.NewZipf(r, 1.2, 1, uint64(len(g.prefixes)-1))
	return g
}

func (g *keyGen) byte() byte {
	switch x := g.r.IntN(100); {
	case x < 84:
		return 'a' + byte(g.r.IntN(4))
	case x < 90:
		return 0
	case x < 96:
		return 0xff
	default:
		return byte(g.r.Uint32())
	}
}

func (g *keyGen) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = g.byte()
	}
	return b
}

func (g *keyGen) key() []byte {
	p := g.prefixes[g.zipf.Uint64()]
	var n int
	switch x := g.r.IntN(100); {
	case x < 60:
		n = 1 + g.r.IntN(3)
	case x < 94:
		n = 1 + g.r.IntN(12)
	default:
		n = 1 + g.r.IntN(g.maxKey)
	}
	k := append(append(make([]byte, 0, len(p)+n), p...), g.bytes(n)...)
	if len(k) > g.maxKey {
		k = k[:g.maxKey]
	}
	// Keys starting with 0x00 or 0xff are left to the runs that make new
	// minima and maxima of the whole tree.
	switch k[0] {
	case 0:
		k[0] = 1
	case 0xff:
		k[0] = 0xfe
	}
	return k
}

// value returns 0..300 bytes, sometimes a few KiB.
func (m *modelRun) value() []byte {
	var n int
	switch x := m.r.IntN(1000); {
	case x < 20:
		n = 0
	case x < 990:
		n = m.r.IntN(301)
	default:
		n = 301 + m.r.IntN(4096)
	}
	off := m.r.IntN(len(m.values) - n + 1)
	return m.values[off : off+n]
}

// newKey returns a key not in the oracle, or nil if it found none.
func (m *modelRun) newKey() []byte {
	r := m.r
	if m.run.left == 0 && r.IntN(400) == 0 {
		// Start a run of sequential keys: ascending runs split the
		// right edge of a leaf again and again, descending ones the left
		// edge. Runs under 0x00 go down and runs under 0xff go up from
		// where the previous one stopped, so every key is a new minimum
		// (maximum) of the whole tree: splits of the leftmost (rightmost)
		// leaf at its edge, and of the nodes above it.
		m.run.left = 20 + r.IntN(300)
		switch r.IntN(4) {
		case 0:
			m.run.base, m.run.down = []byte{0}, true
			m.run.next = m.low
			m.low -= uint32(m.run.left)
		case 1:
			m.run.base, m.run.down = []byte{0xff}, false
			m.run.next = m.high
			m.high += uint32(m.run.left)
		default:
			m.run.base = m.gen.key()
			if len(m.run.base) > m.gen.maxKey-4 {
				m.run.base = m.run.base[:m.gen.maxKey-4]
			}
			m.run.down = r.IntN(2) == 0
			m.run.next = r.Uint32()
		}
		m.count("runs")
	}
	if m.run.left > 0 {
		m.run.left--
		k := append(append([]byte{}, m.run.base...), byte(m.run.next>>24), byte(m.run.next>>16), byte(m.run.next>>8), byte(m.run.next))
		if m.run.down {
			m.run.next--
		} else {
			m.run.next++
		}
		if _, ok := m.pos[string(k)]; !ok {
			return k
		}
	}
	for i := 0; i < 10; i++ {
		k := m.gen.key()
		if _, ok := m.pos[string(k)]; !ok {
			return k
		}
	}
	return nil
}

// someKey returns a live key, or nil if the tree is empty.
func (m *modelRun) someKey() []byte {
	if len(m.keys) == 0 {
		return nil
	}
	return []byte(m.keys[m.r.IntN(len(m.keys))])
}

// anyKey returns a live key or a random one (live or not).
func (m *modelRun) anyKey() []byte {
	if m.r.IntN(2) == 0 {
		if k := m.someKey(); k != nil {
			return k
		}
	}
	return m.gen.key()
}

// bound returns an iteration bound: nil, a live key, a key next to a live
// key, or a random key.
func (m *modelRun) bound() []byte {
	switch x := m.r.IntN(10); {
	case x < 2:
		return nil
	case x < 5:
		if k := m.someKey(); k != nil {
			return k
		}
	case x < 6:
		if k := m.someKey(); k != nil && len(k) < m.gen.maxKey {
			return append(k, 0) // the immediate successor of a live key
		}
	}
	return m.gen.key()
}

// ---- Oracle bookkeeping ----

// oracleSetWord records an entry: a record with value v, or a placeholder.
func (m *modelRun) oracleSetWord(k, v []byte, w Word, ph bool) {
	if old, ok := m.oracle.ReplaceOrInsert(modelItem{string(k), string(v), w, ph}); ok && old.ph {
		m.ph--
	}
	if ph {
		m.ph++
	}
	if _, ok := m.pos[string(k)]; !ok {
		m.pos[string(k)] = len(m.keys)
		m.keys = append(m.keys, string(k))
	}
}

func (m *modelRun) oracleDelete(k []byte) {
	if old, ok := m.oracle.Delete(modelItem{key: string(k)}); ok && old.ph {
		m.ph--
	}
	i, ok := m.pos[string(k)]
	if !ok {
		return
	}
	last := len(m.keys) - 1
	m.keys[i] = m.keys[last]
	m.pos[m.keys[i]] = i
	m.keys = m.keys[:last]
	delete(m.pos, string(k))
}

// records returns the oracle's entries with a record (not placeholders).
func (m *modelRun) records() int { return m.oracle.Len() - m.ph }

// wordOf is the word the tree must report for an oracle entry.
func (m *modelRun) wordOf(it modelItem) Word {
	if it.word == 0 && m.versioned {
		return MakeWord(m.u, false, false)
	}
	return it.word
}

// nextWord draws the word of a write: the next version, sometimes locked.
func (m *modelRun) nextWord() Word {
	m.clock++
	return MakeWord(m.clock, m.r.IntN(4) == 0, false)
}

// switchVersioned switches the tree to versioned mode.
func (m *modelRun) switchVersioned() {
	m.clock += 1 + uint64(m.r.IntN(1000))
	if err := m.tr.SetVersioning(m.clock); err != nil {
		m.fatalf("SetVersioning(%d): %v", m.clock, err)
	}
	m.versioned, m.u = true, m.clock
	m.count("switch to versioned")
	m.checkAll()
}

// put writes k = v as the mode wants (Put, or PutWord with a new word, or
// now and then a placeholder for a new key), and returns what the oracle
// must record.
func (m *modelRun) put(k, v []byte, isNew bool) (w Word, ph bool, err error) {
	if !m.versioned {
		return 0, false, m.tr.Put(k, v)
	}
	w = m.nextWord()
	if isNew && m.r.IntN(8) == 0 {
		w = MakeWord(0, m.r.IntN(8) != 0, true)
		return w, true, m.tr.PutPlaceholder(k, w)
	}
	return w, false, m.tr.PutWord(k, v, w)
}

// upgradeRefused reports whether err is the ErrNeedsSplit that a write of
// an existing key may return in a versioned meganode with no node left to
// rewrite its legacy leaf, and checks that the key did not change.
func (m *modelRun) upgradeRefused(k []byte, err error) bool {
	if !errors.Is(err, ErrNeedsSplit) || !m.versioned || !m.cfg.mustFill ||
		m.tr.nodesInUse()+m.tr.height()+1 <= m.tr.capacity() {
		return false
	}
	m.count("upgrade refused")
	m.checkKey(k)
	return true
}

// checkKey compares what the tree says of k with the oracle.
func (m *modelRun) checkKey(k []byte) {
	want, present := m.oracle.Get(modelItem{key: string(k)})
	got, w, err := m.tr.GetWord(k, nil)
	switch {
	case present && !want.ph:
		if err != nil || string(got) != want.value || w != m.wordOf(want) {
			m.fatalf("GetWord(%q) = %d bytes, %v, %v; want %d bytes, %v", k, len(got), w, err, len(want.value), m.wordOf(want))
		}
	case !errors.Is(err, ErrNotFound):
		m.fatalf("GetWord(%q) of a missing key or placeholder: %v", k, err)
	}
}

// ---- Operations ----

func (m *modelRun) putNew() {
	m.op++
	if len(m.keys) >= m.cfg.maxKeys {
		m.op--
		m.update()
		return
	}
	k := m.newKey()
	if k == nil {
		m.op--
		m.update()
		return
	}
	v := m.value()
	tr := m.tr
	// Near and past the fill threshold, remember the meganode's bytes to
	// prove that a refused insert changed nothing.
	var snap []byte
	allocs, records := m.ext.allocCalls, m.ext.inUse
	nearFull := m.cfg.mustFill && float64(tr.nodesInUse()+tr.height()+1) > 0.85*float64(tr.capacity())
	if nearFull && (m.needsSplit < 50 || m.needsSplit%200 == 0) {
		snap = bytes.Clone(tr.mem[:m.cfg.meganodeSize])
	}
	split := m.splitKind(k)
	w, ph, err := m.put(k, v, true)
	switch {
	case err == nil:
		m.count("insert")
		if ph {
			m.count("placeholder")
		}
		if split != "" {
			m.count(split)
		}
		m.oracleSetWord(k, v, w, ph)
	case errors.Is(err, ErrNeedsSplit):
		if !m.cfg.mustFill {
			m.fatalf("Put(%q) of a new key: %v (meganode %d KiB should not fill)", k, err, m.cfg.meganodeSize>>10)
		}
		m.count("insert refused")
		m.needsSplit++
		// "An insert of a new key returns ErrNeedsSplit, without
		// changing anything" (doc.go).
		if snap != nil {
			m.snapshots++
			if !bytes.Equal(snap, tr.mem[:m.cfg.meganodeSize]) {
				m.fatalf("refused Put(%q) changed the meganode's memory", k)
			}
		}
		if m.ext.allocCalls != allocs || m.ext.inUse != records {
			m.fatalf("refused Put(%q) allocated a record (%d→%d calls, %d→%d in use)", k, allocs, m.ext.allocCalls, records, m.ext.inUse)
		}
		if _, gerr := tr.Get(k, nil); !errors.Is(gerr, ErrNotFound) {
			m.fatalf("Get(%q) after refused insert: %v, want ErrNotFound", k, gerr)
		}
		if !m.full {
			m.full = true
			m.t.Logf("seed %d: first ErrNeedsSplit at op %d with %d keys, %d of %d nodes in use: %v",
				m.seed, m.op, m.records(), tr.nodesInUse(), tr.capacity(), err)
			m.checkAll()
		}
	default:
		m.fatalf("Put(%q, %d bytes): %v", k, len(v), err)
	}
}

// splitKind says where an insert of k will split its leaf, "" if it fits:
// at the left or right edge of the leaf or in the middle, and whether the
// leaf is the leftmost or rightmost of the tree. It reads the writer's view
// under the writer's lock and changes nothing.
func (m *modelRun) splitKind(k []byte) string {
	tr := m.tr
	tr.mu.Lock()
	defer tr.mu.Unlock()
	p, err := tr.descendLocked(k)
	if err != nil {
		m.fatalf("descend(%q): %v", k, err)
	}
	n := tr.nodeBytes(p)
	if n.fits(len(k)) {
		return ""
	}
	i, _ := n.lowerBound(k)
	kind := "split middle"
	switch i {
	case 0:
		kind = "split left edge"
	case n.count():
		kind = "split right edge"
	}
	switch {
	case n.minInf() && n.maxInf():
		kind += " (root leaf)"
	case n.minInf():
		kind += " (leftmost leaf)"
	case n.maxInf():
		kind += " (rightmost leaf)"
	}
	return kind
}

func (m *modelRun) update() {
	m.op++
	k := m.someKey()
	if k == nil {
		m.op--
		m.putNew()
		return
	}
	v := m.value()
	if m.versioned && m.r.IntN(4) == 0 {
		// Change the word only.
		old, _ := m.oracle.Get(modelItem{key: string(k)})
		w := m.nextWord()
		err := m.tr.SetWord(k, w)
		if m.upgradeRefused(k, err) {
			return
		}
		if err != nil {
			m.fatalf("SetWord(%q, %v): %v", k, w, err)
		}
		if old.ph {
			w |= wordPlaceholder
		}
		m.count("set word")
		m.oracleSetWord(k, []byte(old.value), w, old.ph)
		return
	}
	w, _, err := m.put(k, v, false)
	if m.upgradeRefused(k, err) {
		return
	}
	if err != nil {
		// Replacing a value never needs a new node, also when full
		// (but for rewriting a legacy leaf versioned: upgradeRefused).
		m.fatalf("update Put(%q, %d bytes) (full %v): %v", k, len(v), m.full, err)
	}
	m.count("update")
	m.oracleSetWord(k, v, w, false)
}

func (m *modelRun) deleteExisting() {
	m.op++
	k := m.someKey()
	if k == nil {
		m.op--
		m.deleteMissing()
		return
	}
	ok, err := m.tr.Delete(k)
	if m.upgradeRefused(k, err) {
		return
	}
	if !ok || err != nil {
		m.fatalf("Delete(%q) of a live key = %v, %v", k, ok, err)
	}
	m.count("delete")
	m.oracleDelete(k)
}

// purge deletes 90% of the live keys in random order, checking every
// invariant and the contents after, and that nodes came back to the free
// list when the tree had more than a few leaves.
func (m *modelRun) purge() {
	m.op++
	before := m.tr.Usage().Nodes
	order := m.r.Perm(len(m.keys))
	keys := make([]string, 0, len(order))
	for _, i := range order[:len(order)*9/10] {
		keys = append(keys, m.keys[i])
	}
	for _, k := range keys {
		ok, err := m.tr.Delete([]byte(k))
		if m.upgradeRefused([]byte(k), err) {
			continue
		}
		if !ok || err != nil {
			m.fatalf("purge: Delete(%q) of a live key = %v, %v", k, ok, err)
		}
		m.oracleDelete([]byte(k))
	}
	after := m.tr.Usage().Nodes
	m.count("purge")
	if before > 64 && after*3 > before {
		m.fatalf("purge of %d keys: %d nodes in use before, %d after: nodes were not merged", len(keys), before, after)
	}
	m.checkAll()
}

func (m *modelRun) deleteMissing() {
	m.op++
	k := m.gen.key()
	_, want := m.pos[string(k)]
	ok, err := m.tr.Delete(k)
	if want && m.upgradeRefused(k, err) {
		return
	}
	if ok != want || err != nil {
		m.fatalf("Delete(%q) = %v, %v; oracle has it: %v", k, ok, err, want)
	}
	m.count("delete missing")
	if ok {
		m.oracleDelete(k)
	}
}

func (m *modelRun) get() {
	m.op++
	k := m.anyKey()
	want, present := m.oracle.Get(modelItem{key: string(k)})
	present = present && !want.ph
	// Get appends to dst: sometimes pass a non-empty one.
	prefix := ""
	if m.r.IntN(4) == 0 {
		prefix = "dst:"
	}
	m.buf = append(m.buf[:0], prefix...)
	var got []byte
	var err error
	if m.r.IntN(2) == 0 {
		var w Word
		got, w, err = m.tr.GetWord(k, m.buf)
		if present && err == nil && w != m.wordOf(want) {
			m.fatalf("GetWord(%q): word %v, want %v", k, w, m.wordOf(want))
		}
	} else {
		got, err = m.tr.Get(k, m.buf)
	}
	switch {
	case present && err != nil:
		m.fatalf("Get(%q): %v, want %d bytes", k, err, len(want.value))
	case present && string(got) != prefix+want.value:
		m.fatalf("Get(%q) = %d bytes %.40q, want %d bytes %.40q", k, len(got)-len(prefix), got[len(prefix):], len(want.value), want.value)
	case !present && !errors.Is(err, ErrNotFound):
		m.fatalf("Get(%q) of a missing key: %q, %v; want ErrNotFound", k, got, err)
	case !present && string(got) != prefix:
		m.fatalf("Get(%q) of a missing key changed dst to %q", k, got)
	}
	m.count("get")
}

func (m *modelRun) contains() {
	m.op++
	k := m.anyKey()
	item, want := m.oracle.Get(modelItem{key: string(k)})
	got, err := m.tr.Contains(k)
	if got != (want && !item.ph) || err != nil {
		m.fatalf("Contains(%q) = %v, %v; want %v (placeholder %v)", k, got, err, want, item.ph)
	}
	res, err := m.tr.Search(k)
	var ww Word
	if want {
		ww = m.wordOf(item)
	}
	if err != nil || res.Found != (want && !item.ph) || res.Word != ww {
		m.fatalf("Search(%q) = found %v word %v, %v; want %v, %v", k, res.Found, res.Word, err, want && !item.ph, ww)
	}
	m.count("contains")
}

// invalidKey checks that bad keys are refused with typed errors and change
// nothing.
func (m *modelRun) invalidKey() {
	m.op++
	long := bytes.Repeat([]byte{'x'}, m.tr.MaxKeySize()+1+m.r.IntN(8))
	k := m.anyKey()
	if m.versioned {
		if err := m.tr.Put(k, []byte("v")); !errors.Is(err, ErrNeedsWord) {
			m.fatalf("Put(%q) in versioned mode: %v", k, err)
		}
	} else if err := m.tr.PutWord(k, []byte("v"), 7); !errors.Is(err, ErrNotVersioned) {
		m.fatalf("PutWord(%q) in legacy mode: %v", k, err)
	}
	if err := m.tr.Put(nil, []byte("v")); !errors.Is(err, ErrEmptyKey) {
		m.fatalf("Put(empty key): %v", err)
	}
	if err := m.tr.Put(long, []byte("v")); !errors.Is(err, ErrKeyTooLarge) {
		m.fatalf("Put(%d-byte key): %v", len(long), err)
	}
	if _, err := m.tr.Get(long, nil); !errors.Is(err, ErrKeyTooLarge) {
		m.fatalf("Get(%d-byte key): %v", len(long), err)
	}
	if _, err := m.tr.Delete(nil); !errors.Is(err, ErrEmptyKey) {
		m.fatalf("Delete(empty key): %v", err)
	}
	m.count("invalid key")
}

// oracleScan returns what Scan must visit.
func (m *modelRun) oracleScan(o ScanOptions) []modelItem {
	var out []modelItem
	lo, hi := string(o.Lower), string(o.Upper)
	take := func(it modelItem) bool {
		if o.Limit > 0 && len(out) >= o.Limit {
			return false
		}
		if o.Reverse && o.Lower != nil && it.key < lo || !o.Reverse && o.Upper != nil && it.key >= hi {
			return false
		}
		if it.ph {
			return true
		}
		it.word = m.wordOf(it)
		out = append(out, it)
		return true
	}
	switch {
	case !o.Reverse && o.Lower == nil:
		m.oracle.Ascend(take)
	case !o.Reverse:
		m.oracle.AscendGreaterOrEqual(modelItem{key: lo}, take)
	case o.Upper == nil:
		m.oracle.Descend(take)
	default:
		m.oracle.DescendLessOrEqual(modelItem{key: hi}, func(it modelItem) bool {
			return it.key == hi || take(it)
		})
	}
	return out
}

func (m *modelRun) scan() {
	m.op++
	r := m.r
	o := ScanOptions{Lower: m.bound(), Upper: m.bound(), Reverse: r.IntN(2) == 0}
	if r.IntN(10) < 8 || o.Lower == nil || o.Upper == nil {
		o.Limit = 1 + r.IntN(24)
	}
	stopAfter := -1 // fn returns false after this many keys
	if r.IntN(10) == 0 {
		stopAfter = r.IntN(8)
	}
	want := m.oracleScan(o)
	if stopAfter >= 0 && len(want) > stopAfter+1 {
		want = want[:stopAfter+1]
	}
	var got []modelItem
	var err error
	if m.r.IntN(2) == 0 {
		err = m.tr.ScanWords(o, func(k, v []byte, w Word) bool {
			got = append(got, modelItem{string(k), string(v), w, false})
			return len(got) != stopAfter+1
		})
	} else {
		err = m.tr.Scan(o, func(k, v []byte) bool {
			got = append(got, modelItem{key: string(k), value: string(v)})
			return len(got) != stopAfter+1
		})
		for i := range min(len(got), len(want)) {
			got[i].word = want[i].word
		}
	}
	if err != nil {
		m.fatalf("Scan(lower %q upper %q limit %d reverse %v): %v", o.Lower, o.Upper, o.Limit, o.Reverse, err)
	}
	if len(got) != len(want) {
		m.fatalf("Scan(lower %q upper %q limit %d reverse %v stop %d): %d keys, want %d\n got %.20v\nwant %.20v",
			o.Lower, o.Upper, o.Limit, o.Reverse, stopAfter, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			m.fatalf("Scan(lower %q upper %q limit %d reverse %v): entry %d = %.40v, want %.40v",
				o.Lower, o.Upper, o.Limit, o.Reverse, i, got[i], want[i])
		}
	}
	m.count("scan")
}

// oracleIter is Iter's specification over the oracle.
type oracleIter struct {
	o            *btree.BTreeG[modelItem]
	lower, upper []byte
	valid        bool
	key          string
}

func (o *oracleIter) inUpper(k string) bool { return o.upper == nil || k < string(o.upper) }
func (o *oracleIter) inLower(k string) bool { return o.lower == nil || k >= string(o.lower) }

// ge positions at the first key >= k (> k if strict) below the upper bound.
func (o *oracleIter) ge(k string, strict bool) bool {
	o.valid = false
	o.o.AscendGreaterOrEqual(modelItem{key: k}, func(it modelItem) bool {
		if strict && it.key == k || it.ph {
			return true
		}
		o.valid, o.key = o.inUpper(it.key), it.key
		return false
	})
	return o.valid
}

// lt positions at the last key < k (<= k if !strict) at or above the lower
// bound; k == nil means +inf.
func (o *oracleIter) lt(k []byte, strict bool) bool {
	o.valid = false
	f := func(it modelItem) bool {
		if strict && k != nil && it.key == string(k) || it.ph {
			return true
		}
		o.valid, o.key = o.inLower(it.key), it.key
		return false
	}
	if k == nil {
		o.o.Descend(f)
	} else {
		o.o.DescendLessOrEqual(modelItem{key: string(k)}, f)
	}
	return o.valid
}

func (o *oracleIter) first() bool { return o.ge(string(o.lower), false) }
func (o *oracleIter) last() bool  { return o.lt(o.upper, true) }

func (o *oracleIter) seekGE(k []byte) bool {
	if o.lower != nil && bytes.Compare(k, o.lower) < 0 {
		k = o.lower
	}
	return o.ge(string(k), false)
}

func (o *oracleIter) seekLT(k []byte) bool {
	if o.upper != nil && bytes.Compare(k, o.upper) > 0 {
		k = o.upper
	}
	return o.lt(k, true)
}

func (o *oracleIter) next() bool {
	if !o.valid {
		return false
	}
	return o.ge(o.key, true)
}

func (o *oracleIter) prev() bool {
	if !o.valid {
		return false
	}
	return o.lt([]byte(o.key), true)
}

// iterSession compares an Iter step by step with the oracle over a random
// mix of positioning calls; every step counts as one operation.
func (m *modelRun) iterSession() {
	r := m.r
	var opts IterOptions
	if r.IntN(2) == 0 {
		opts.Lower = m.bound()
	}
	if r.IntN(2) == 0 {
		opts.Upper = m.bound()
	}
	it := m.tr.NewIter(&opts)
	o := &oracleIter{o: m.oracle, lower: opts.Lower, upper: opts.Upper}
	steps := 1 + r.IntN(40)
	var trace []string
	for s := 0; s < steps; s++ {
		m.op++
		var got, want bool
		var call string
		switch x := r.IntN(100); {
		case x < 8:
			call = "First"
			got, want = it.First(), o.first()
		case x < 16:
			call = "Last"
			got, want = it.Last(), o.last()
		case x < 28:
			k := m.anyKey()
			call = fmt.Sprintf("SeekGE(%q)", k)
			got, want = it.SeekGE(k), o.seekGE(k)
		case x < 40:
			k := m.anyKey()
			call = fmt.Sprintf("SeekLT(%q)", k)
			got, want = it.SeekLT(k), o.seekLT(k)
		case x < 70:
			call = "Next"
			got, want = it.Next(), o.next()
		default:
			call = "Prev"
			got, want = it.Prev(), o.prev()
		}
		trace = append(trace, call)
		if got != want || got != it.Valid() || got && string(it.Key()) != o.key {
			m.fatalf("Iter(lower %q, upper %q) after %s: valid %v key %q, want valid %v key %q",
				opts.Lower, opts.Upper, strings.Join(trace, ", "), got, it.Key(), want, o.key)
		}
		if err := it.Error(); err != nil {
			m.fatalf("Iter after %s: %v", strings.Join(trace, ", "), err)
		}
		if got && r.IntN(8) == 0 {
			v, err := it.Value()
			w, _ := m.oracle.Get(modelItem{key: o.key})
			if err != nil || string(v) != w.value {
				m.fatalf("Iter.Value at %q after %s: %d bytes, %v; want %d bytes", o.key, strings.Join(trace, ", "), len(v), err, len(w.value))
			}
			if it.Word() != m.wordOf(w) {
				m.fatalf("Iter.Word at %q after %s: %v, want %v", o.key, strings.Join(trace, ", "), it.Word(), m.wordOf(w))
			}
		}
	}
	m.count("iter step")
}

// checkAll runs the invariant checker and compares the whole tree with the
// oracle in both directions.
func (m *modelRun) checkAll() {
	m.t.Helper()
	if err := m.tr.CheckErr(); err != nil {
		m.fatalf("Check: %v", err)
	}
	if m.ext.inUse != m.records() {
		m.fatalf("%d records in use for %d keys: updates and deletes must free the old record", m.ext.inUse, m.records())
	}
	all := m.oracleScan(ScanOptions{})
	it := m.tr.NewIter(nil)
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if i >= len(all) || string(it.Key()) != all[i].key {
			m.fatalf("full iteration: key %d is %q, want %q", i, it.Key(), all[min(i, len(all)-1)].key)
		}
		v, err := it.Value()
		if err != nil || string(v) != all[i].value {
			m.fatalf("full iteration: value of %q: %d bytes, %v; want %d bytes", it.Key(), len(v), err, len(all[i].value))
		}
		if it.Word() != all[i].word {
			m.fatalf("full iteration: word of %q: %v, want %v", it.Key(), it.Word(), all[i].word)
		}
		i++
	}
	if i != len(all) || it.Error() != nil {
		m.fatalf("full iteration: %d keys, want %d; err %v", i, len(all), it.Error())
	}
	for ok := it.Last(); ok; ok = it.Prev() {
		i--
		if i < 0 || string(it.Key()) != all[i].key {
			m.fatalf("full reverse iteration: position %d is %q", i, it.Key())
		}
	}
	if i != 0 || it.Error() != nil {
		m.fatalf("full reverse iteration stopped at %d; err %v", i, it.Error())
	}
}

// FuzzModel is the model test driven by the fuzzer: every decision of the
// run (operation, key, value, run of sequential keys) is drawn from the
// fuzz input, eight bytes at a time, then from a PCG seeded by it once
// the input is used up, so that the fuzzer's mutations steer the
// operations and coverage guides it (a differential fuzz of the tree
// against a google/btree sorted map, compared after every operation).
func FuzzModel(f *testing.F) {
	f.Add(uint64(0), []byte("cell"))
	f.Add(uint64(1), bytes.Repeat([]byte{0xff, 0, 0x80, 7}, 64))
	f.Add(uint64(2), []byte{})
	f.Add(uint64(3), bytes.Repeat([]byte{1}, 512))
	f.Fuzz(func(t *testing.T, seed uint64, input []byte) {
		// The small configuration (seed%4 == 3: 512 nodes of 512 bytes):
		// splits within a few hundred operations, and cheap to set up.
		seed = seed&^3 | 3
		runModelFrom(t, seed, 300, 1<<20, &bytesSource{b: input, fallback: rand.NewPCG(seed, uint64(len(input)))})
	})
}

// bytesSource draws from b, eight bytes a number, then from fallback.
type bytesSource struct {
	b        []byte
	fallback rand.Source
}

func (s *bytesSource) Uint64() uint64 {
	if len(s.b) == 0 {
		return s.fallback.Uint64()
	}
	var v uint64
	n := min(8, len(s.b))
	for i := range n {
		v |= uint64(s.b[i]) << (8 * i)
	}
	s.b = s.b[n:]
	return v
}
