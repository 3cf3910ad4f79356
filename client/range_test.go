package client

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cellstore/cell/locality"
)

// TestRange checks Range and Scan against the sorted keys on a real
// server: bounds, limits, resume keys, reverse order, keys only, paging.
func TestRange(t *testing.T) {
	rc := startReal(t, 1, nil)
	for _, provider := range []string{ProviderTCP, ProviderSHM} {
		for _, mode := range []locality.Mode{{Kind: locality.ServerOnly}, {Kind: locality.ClientOnly}, {Kind: locality.Adaptive}} {
			t.Run(mode.String()+"/"+provider, func(t *testing.T) {
				cfg := realConfig(t, rc)
				cfg.RangePageSize = 7
				cfg.Mode, cfg.Provider = mode, provider
				rangeChecks(t, mustClient(t, cfg))
			})
		}
	}
}

// TestRangeMultiMeganode is TestRange across four leaf meganodes on two
// servers (the fixture cluster): pages stop at meganode boundaries and
// continue on the other server.
func TestRangeMultiMeganode(t *testing.T) {
	cl := newTestCluster(t, clusterSpec{servers: 2, splits: splitsFor(250, 4)})
	for _, mode := range []locality.Mode{{Kind: locality.ServerOnly}, {Kind: locality.ClientOnly}} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := testConfig(t, cl)
			cfg.RangePageSize = 7
			cfg.Mode = mode
			rangeChecks(t, mustClient(t, cfg))
		})
	}
}

func rangeChecks(t *testing.T, c *Client) {
	const n = 250
	ctx := testCtx(t, 20*time.Second)
	mustPut(t, c, n)
	keys := func(lo, hi int, reverse bool) []int {
		var out []int
		for i := lo; i < hi; i++ {
			out = append(out, i)
		}
		if reverse {
			slices.Reverse(out)
		}
		return out
	}
	check := func(name string, pairs []KV, want []int, keysOnly bool) {
		t.Helper()
		if len(pairs) != len(want) {
			t.Fatalf("%s: %d pairs, want %d", name, len(pairs), len(want))
		}
		for j, i := range want {
			wv := value(i, 0)
			if keysOnly {
				wv = nil
			}
			if !bytes.Equal(pairs[j].Key, key(i)) || !bytes.Equal(pairs[j].Value, wv) {
				t.Fatalf("%s: pair %d = %q=%q, want %q=%q", name, j, pairs[j].Key, pairs[j].Value, key(i), wv)
			}
		}
	}
	for _, tt := range []struct {
		lo, hi  int // key indexes; -1 unbounded
		limit   int
		reverse bool
	}{
		{-1, -1, 0, false}, {-1, -1, 0, true},
		{10, 200, 0, false}, {10, 200, 0, true},
		{10, 200, 33, false}, {10, 200, 33, true},
		{60, 70, 0, false}, {62, 63, 0, true},
		{100, 100, 0, false}, {-1, 5, 0, true}, {240, -1, 0, false},
	} {
		name := fmt.Sprintf("[%d,%d) limit %d reverse %v", tt.lo, tt.hi, tt.limit, tt.reverse)
		var start, end []byte
		lo, hi := 0, n
		if tt.lo >= 0 {
			start, lo = key(tt.lo), tt.lo
		}
		if tt.hi >= 0 {
			end, hi = key(tt.hi), tt.hi
		}
		want := keys(lo, hi, tt.reverse)
		pairs, resume, err := c.Range(ctx, start, end, RangeOptions{Limit: tt.limit, Reverse: tt.reverse})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tt.limit > 0 && tt.limit < len(want) {
			check(name, pairs, want[:tt.limit], false)
			if resume == nil {
				t.Fatalf("%s: no resume key after a limited range", name)
			}
			// Continue from the resume key.
			if tt.reverse {
				end = resume
			} else {
				start = resume
			}
			rest, resume2, err := c.Range(ctx, start, end, RangeOptions{Reverse: tt.reverse})
			if err != nil || resume2 != nil {
				t.Fatalf("%s: resumed: %v, resume %q", name, err, resume2)
			}
			check(name+" resumed", rest, want[tt.limit:], false)
		} else {
			check(name, pairs, want, false)
			if resume != nil {
				t.Fatalf("%s: resume %q after an exhausted range", name, resume)
			}
		}
		// Scan yields the same, page by page.
		seq, errf := c.Scan(ctx, start, end, RangeOptions{Reverse: tt.reverse})
		var got []KV
		for k, v := range seq {
			got = append(got, KV{k, v})
		}
		if err := errf(); err != nil {
			t.Fatalf("%s: scan: %v", name, err)
		}
		wantScan := want // from the resume key on, for limited ranges
		if tt.limit > 0 && tt.limit < len(want) {
			wantScan = want[tt.limit:]
		}
		check(name+" scan", got, wantScan, false)
	}
	pairs, _, err := c.Range(ctx, key(20), key(30), RangeOptions{KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	check("keys only", pairs, keys(20, 30, false), true)
	// Breaking out of a scan early, and a scan limit.
	seq, errf := c.Scan(ctx, nil, nil, RangeOptions{Limit: 20})
	count := 0
	for range seq {
		count++
		if count == 15 {
			break
		}
	}
	if count != 15 || errf() != nil {
		t.Fatalf("early break: %d pairs, %v", count, errf())
	}
	count = 0
	for range seq {
		count++
	}
	if count != 20 || errf() != nil {
		t.Fatalf("scan limit 20: %d pairs, %v", count, errf())
	}
	st := c.Stats()
	if st.Ops["range"] < 20 {
		t.Errorf("range ops counted: %d", st.Ops["range"])
	}
	switch c.sel.Mode().Kind {
	case locality.ClientOnly:
		if st.ClientSideOps["range"] == 0 {
			t.Error("no range served client-side in client mode")
		}
	case locality.ServerOnly:
		if st.ClientSideOps["range"] != 0 {
			t.Error("a range served client-side in server mode")
		}
	}
	// Leave the store empty.
	for i := range n {
		if err := c.Delete(ctx, key(i)); err != nil {
			t.Fatal(err)
		}
	}
}
