package rsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cellstore/cell/blink"
)

// A transaction whose records do not all fit the region's extents is
// refused whole, before its first write (docs/transactions.md: "No
// transaction is ever half-applied"): the first puts fit, a later one
// does not, and nothing of it is applied.
func TestTxnExtentsFullChangesNothing(t *testing.T) {
	m, _ := newMachine(t, 1, testLayout)
	index := uint64(0)
	apply := func(r *Record) (Result, error) {
		t.Helper()
		index++
		return m.Apply(index, AppendRecord(nil, r))
	}
	for _, r := range []*Record{
		{Kind: KindRegion, Value: AppendRegionBody(nil, testLayout)},
		{Kind: KindRoot, Value: AppendRootBody(nil, RootFormat)},
	} {
		if _, err := apply(r); err != nil {
			t.Fatal(err)
		}
	}
	root := m.State().NewRoot
	if _, err := apply(&Record{Kind: KindRoot, Meganode: root, Value: AppendRootBody(nil, RootPublish)}); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(&Record{Kind: KindVersion}); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("v"), 1<<20-64)
	var writes []TxnWrite
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} { // 6 MiB of records in a 4 MiB region
		writes = append(writes, TxnWrite{Op: TxnPut, Key: []byte(k), Value: big})
	}
	_, err := apply(&Record{Kind: KindTxn, Meganode: root, Value: AppendTxnBody(nil, &TxnBody{Writes: writes})})
	if !errors.Is(err, blink.ErrExtentsFull) {
		t.Fatalf("a transaction larger than the region: %v, want ErrExtentsFull", err)
	}
	lm := m.MeganodeAt(root)
	for _, w := range writes {
		if _, err := lm.T.Get(w.Key, nil); !errors.Is(err, blink.ErrNotFound) {
			t.Fatalf("%q after the refused transaction: %v (half applied)", w.Key, err)
		}
	}
	// The allocator's free lists may be ordered otherwise after the trial
	// allocations, but the tree's nodes are as before.
	if err := lm.T.CheckErr(); err != nil {
		t.Fatal(err)
	}
	// Two of the records fit: applied whole.
	if res, err := apply(&Record{Kind: KindTxn, Meganode: root, Value: AppendTxnBody(nil, &TxnBody{Writes: writes[:2]})}); err != nil || res.Version == 0 {
		t.Fatalf("a transaction that fits: %+v, %v", res, err)
	}
}
