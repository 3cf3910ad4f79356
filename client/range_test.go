package client

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
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
		var got []KV
		for kv, err := range c.Scan(ctx, start, end, RangeOptions{Reverse: tt.reverse}) {
			if err != nil {
				t.Fatalf("%s: scan: %v", name, err)
			}
			got = append(got, kv)
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
	seq := c.Scan(ctx, nil, nil, RangeOptions{Limit: 20})
	count := 0
	for _, err := range seq {
		if err != nil {
			t.Fatalf("early break: %v", err)
		}
		count++
		if count == 15 {
			break
		}
	}
	if count != 15 {
		t.Fatalf("early break: %d pairs", count)
	}
	count = 0
	for _, err := range seq {
		if err != nil {
			t.Fatalf("scan limit 20: %v", err)
		}
		count++
	}
	if count != 20 {
		t.Fatalf("scan limit 20: %d pairs", count)
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

// TestPrefixEnd checks PrefixEnd on the edges: the empty prefix and
// prefixes ending in (or made of) 0xff bytes.
func TestPrefixEnd(t *testing.T) {
	for _, tt := range []struct{ prefix, want []byte }{
		{nil, nil},
		{[]byte{}, nil},
		{[]byte("a"), []byte("b")},
		{[]byte("ab"), []byte("ac")},
		{[]byte("a\xff"), []byte("b")},
		{[]byte("a\xff\xff"), []byte("b")},
		{[]byte("a\xfe\xff"), []byte("a\xff")},
		{[]byte{0}, []byte{1}},
		{[]byte{0xff}, nil},
		{[]byte{0xff, 0xff, 0xff}, nil},
	} {
		p := bytes.Clone(tt.prefix)
		got := PrefixEnd(p)
		if !bytes.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
			t.Errorf("PrefixEnd(%q) = %q, want %q", tt.prefix, got, tt.want)
		}
		if !bytes.Equal(p, tt.prefix) {
			t.Errorf("PrefixEnd(%q) modified its argument to %q", tt.prefix, p)
		}
		if len(got) > 0 {
			got[0] = 'X' // must not alias the prefix
			if !bytes.Equal(p, tt.prefix) {
				t.Errorf("PrefixEnd(%q) aliases its argument", tt.prefix)
			}
		}
	}
}

// TestRangePrefix checks Range and Scan with RangeOptions.Prefix on a real
// server against the stored keys filtered by bytes.HasPrefix: the empty
// prefix (every key), prefixes with and without 0xff bytes, a prefix no
// key has, both orders, limits and resuming, paging, and an end given
// with a prefix.
func TestRangePrefix(t *testing.T) {
	rc := startReal(t, 1, nil)
	keys := []string{
		"a", "ab", "ab\x00", "abc", "ab\xfe", "ab\xff", "ab\xff\x00", "ab\xff\xff", "ac",
		"b", "ba", "\xfe\xff", "\xff", "\xff\x00", "\xff\xff", "\xff\xff\x01",
	}
	slices.Sort(keys)
	prefixes := []string{"", "a", "ab", "ab\xff", "ab\xff\xff", "abc", "b", "\xff", "\xff\xff", "\xfe", "zz", "abcd"}
	for _, mode := range []locality.Mode{{Kind: locality.ServerOnly}, {Kind: locality.ClientOnly}} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := realConfig(t, rc)
			cfg.RangePageSize = 2
			cfg.Mode = mode
			c := mustClient(t, cfg)
			ctx := testCtx(t, 20*time.Second)
			for _, k := range keys {
				if err := c.Put(ctx, []byte(k), []byte("v"+k)); err != nil {
					t.Fatalf("Put %q: %v", k, err)
				}
			}
			defer func() { // leave the store empty
				for _, k := range keys {
					if err := c.Delete(ctx, []byte(k)); err != nil {
						t.Fatal(err)
					}
				}
			}()
			asStrings := func(pairs []KV) []string {
				var out []string
				for _, kv := range pairs {
					if string(kv.Value) != "v"+string(kv.Key) {
						t.Fatalf("%q = %q", kv.Key, kv.Value)
					}
					out = append(out, string(kv.Key))
				}
				return out
			}
			for _, p := range prefixes {
				for _, rev := range []bool{false, true} {
					name := fmt.Sprintf("prefix %q reverse %v", p, rev)
					var want []string
					for _, k := range keys {
						if strings.HasPrefix(k, p) {
							want = append(want, k)
						}
					}
					if rev {
						slices.Reverse(want)
					}
					opts := RangeOptions{Prefix: true, Reverse: rev}
					pairs, resume, err := c.Range(ctx, []byte(p), nil, opts)
					if err != nil || resume != nil {
						t.Fatalf("%s: Range: %v, resume %q", name, err, resume)
					}
					if got := asStrings(pairs); !slices.Equal(got, want) {
						t.Fatalf("%s: Range = %q, want %q", name, got, want)
					}
					var got []KV
					for kv, err := range c.Scan(ctx, []byte(p), nil, opts) {
						if err != nil {
							t.Fatalf("%s: Scan: %v", name, err)
						}
						got = append(got, kv)
					}
					if got := asStrings(got); !slices.Equal(got, want) {
						t.Fatalf("%s: Scan = %q, want %q", name, got, want)
					}
					// A limited prefix range, continued as Range's doc says.
					if len(want) < 2 {
						continue
					}
					opts.Limit = 1
					pairs, resume, err = c.Range(ctx, []byte(p), nil, opts)
					if err != nil || resume == nil {
						t.Fatalf("%s: limit 1: %v, resume %q", name, err, resume)
					}
					start, end := resume, PrefixEnd([]byte(p))
					if rev {
						start, end = []byte(p), resume
					}
					rest, resume, err := c.Range(ctx, start, end, RangeOptions{Reverse: rev})
					if err != nil || resume != nil {
						t.Fatalf("%s: resumed: %v, resume %q", name, err, resume)
					}
					if got := asStrings(append(pairs, rest...)); !slices.Equal(got, want) {
						t.Fatalf("%s: limit 1 and resumed = %q, want %q", name, got, want)
					}
				}
			}
			// With Prefix, end must be nil.
			if _, _, err := c.Range(ctx, []byte("a"), []byte("b"), RangeOptions{Prefix: true}); err == nil {
				t.Error("Range with a prefix and an end: no error")
			}
			n := 0
			for kv, err := range c.Scan(ctx, []byte("a"), []byte("b"), RangeOptions{Prefix: true}) {
				if n++; err == nil || kv.Key != nil {
					t.Errorf("Scan with a prefix and an end yielded %q, %v; want only an error", kv.Key, err)
				}
			}
			if n != 1 {
				t.Errorf("Scan with a prefix and an end yielded %d times, want once (the error)", n)
			}
		})
	}
}
