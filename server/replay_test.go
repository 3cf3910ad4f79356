package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// recordLog keeps a copy of every record apply applied, in log order,
// with its log index.
type recordLog struct {
	mu   sync.Mutex
	recs []indexedRecord
}

type indexedRecord struct {
	index uint64
	rec   []byte
}

func (l *recordLog) record(index uint64, rec []byte, _ error) {
	l.mu.Lock()
	l.recs = append(l.recs, indexedRecord{index, bytes.Clone(rec)})
	l.mu.Unlock()
}

// docs/design.md §9: "Applying is deterministic: same records, byte-identical
// region images (node and extent allocation, slot choice, root word,
// applied index)." A split-heavy run (puts, overwrites and deletes from
// concurrent writers into 16 KiB meganodes, dozens of splits and a tree of
// meganodes two levels deep) records every applied record; replaying
// that log onto a fresh region gives the same bytes, the whole region
// file.
func TestReplayByteIdentical(t *testing.T) {
	var log recordLog
	s, _ := newTestServer(t, func(o *Options) {
		o.MeganodeSize = 16 << 10
		o.RegionSize = 16 << 20
		o.Cores = 2
		o.TestingKnobs.OnApply = log.record
	})
	const n, writers = 3000, 4
	pad := strings.Repeat("p", 60) // long keys: few per node, many nodes
	var wg sync.WaitGroup
	for g := range writers {
		c := dial(t, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range n / writers {
				k := fmt.Sprintf("key%06d%s", rng.IntN(n), pad)
				var err error
				if i%7 == 6 {
					_, err = c.CallMessage(ctxT(t), wire.OpDelete, &wire.DeleteRequest{Key: []byte(k)})
					if wire.StatusOf(err) == wire.StatusNotFound {
						err = nil
					}
				} else {
					v := bytes.Repeat([]byte{byte('a' + i%26)}, 10+rng.IntN(300))
					_, err = c.CallMessage(ctxT(t), wire.OpPut, &wire.PutRequest{Key: []byte(k), Value: v})
				}
				if err != nil {
					t.Errorf("write %q: %v", k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	waitSplitsIdle(t, s)
	if t.Failed() {
		return
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	// The image and the log at one instant: apply holds applyMu, and so
	// does OnApply.
	var want []byte
	var recs []indexedRecord
	var applied uint64
	s.reps.own.sm.Exclusive(func(r *meganode.Region, _ uint64) {
		want = bytes.Clone(r.Bytes())
		log.mu.Lock()
		recs = slices.Clone(log.recs)
		log.mu.Unlock()
		applied = r.Applied()
	})
	if last := recs[len(recs)-1].index; applied != last {
		t.Fatalf("the region's applied index is %d, the last record's %d", applied, last)
	}
	splits := 0
	for _, ir := range recs {
		if r, err := rsm.DecodeRecord(ir.rec); err == nil && r.Kind == rsm.KindSplit {
			if b, _ := rsm.DecodeSplitBody(r.Value); b.Phase == rsm.PhaseEnd {
				splits++
			}
		}
	}
	if splits < 10 || levels(t, s) < 2 {
		t.Fatalf("%d splits, %d levels: not the split-heavy run this test needs", splits, levels(t, s))
	}

	got := replayOnto(t, recs)
	if len(got) != len(want) {
		t.Fatalf("replayed region of %d bytes, the original %d", len(got), len(want))
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("%d records replayed (%d splits): the images differ first at offset %#x", len(recs), splits, i)
	}
	t.Logf("%d records (%d splits, %d levels) replayed onto a fresh region: %d bytes identical", len(recs), splits, levels(t, s), len(want))
}

// replayOnto applies recs to a fresh region of a server that never starts
// (no raft, no listeners) and returns a copy of the region's bytes.
func replayOnto(t *testing.T, recs []indexedRecord) []byte {
	t.Helper()
	store := regiontable.NewMemory()
	t.Cleanup(func() { _ = store.Close() })
	opts := testOptions(t, store)
	opts.ServerID = "replay"
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if r.dir, err = openDataDir(opts.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := r.openRegion(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.reps.own.sm.Close()
		_ = r.dir.close()
	})
	for _, ir := range recs {
		_, _ = r.reps.own.sm.Apply(ir.index, ir.rec) // errors are outcomes too, the same ones
	}
	return bytes.Clone(r.reps.own.sm.Region().Bytes())
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
