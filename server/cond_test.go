package server

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/wire"
)

// Conditional writes, docs/transactions.md §3: "A conditional put or
// delete is one record of the key's region, its test and its write atomic
// in apply ... When the test fails, nothing changes and the outcome is
// ErrConditionFailed, with the key's current version".

// condFailed returns the current version a *ConditionFailedError names,
// failing the test for any other outcome.
func condFailed(t *testing.T, err error) uint64 {
	t.Helper()
	var cf *client.ConditionFailedError
	if !errors.As(err, &cf) || !errors.Is(err, client.ErrConditionFailed) {
		t.Fatalf("got %v, want a condition failure", err)
	}
	return cf.Version
}

// TestConditionalWrites: put-if-absent, put-if-version, put-if-value and
// delete-if-version, each holding and failing; a failed condition changes
// nothing and names the current version.
func TestConditionalWrites(t *testing.T) {
	s, store := newTestServer(t)
	waitVersioned(t, s)
	c := newClient(t, store, "server")
	ctx := ctxT(t)
	k := []byte("cas/a")

	v1, err := c.PutIf(ctx, k, []byte("one"), client.IfAbsent())
	if err != nil || v1 == 0 {
		t.Fatalf("put if absent: %d, %v", v1, err)
	}
	if got := condFailed(t, func() error { _, err := c.PutIf(ctx, k, []byte("two"), client.IfAbsent()); return err }()); got != v1 {
		t.Fatalf("failed put if absent names version %d, want %d", got, v1)
	}
	if got := condFailed(t, func() error { _, err := c.PutIf(ctx, k, []byte("two"), client.IfVersion(v1+100)); return err }()); got != v1 {
		t.Fatalf("failed put if version names %d, want %d", got, v1)
	}
	v2, err := c.PutIf(ctx, k, []byte("two"), client.IfVersion(v1))
	if err != nil || v2 <= v1 {
		t.Fatalf("put if version %d: %d, %v", v1, v2, err)
	}
	if kv, err := c.GetKV(ctx, k); err != nil || string(kv.Value) != "two" || kv.Version != v2 {
		t.Fatalf("after put if version: %q @%d, %v; want \"two\" @%d", kv.Value, kv.Version, err, v2)
	}
	condFailed(t, func() error { _, err := c.PutIf(ctx, k, []byte("three"), client.IfValue([]byte("one"))); return err }())
	v3, err := c.PutIf(ctx, k, []byte("three"), client.IfValue([]byte("two")))
	if err != nil || v3 <= v2 {
		t.Fatalf("put if value: %d, %v", v3, err)
	}
	if _, err := c.PutIf(ctx, k, []byte("four"), client.IfVersionCompare(client.Greater, v3)); !errors.Is(err, client.ErrConditionFailed) {
		t.Fatalf("put if version > current: %v", err)
	}
	if got := condFailed(t, c.DeleteIf(ctx, k, client.IfVersion(v2))); got != v3 {
		t.Fatalf("failed delete if version names %d, want %d", got, v3)
	}
	if err := c.DeleteIf(ctx, k, client.IfVersion(v3)); err != nil {
		t.Fatal(err)
	}
	if got := condFailed(t, c.DeleteIf(ctx, k, client.IfPresent())); got != 0 {
		t.Fatalf("failed delete of an absent key names version %d, want 0", got)
	}
	// Absent → present → absent → present: a new version, above all.
	v4, err := c.PutIf(ctx, k, []byte("again"), client.IfVersion(0))
	if err != nil || v4 <= v3 {
		t.Fatalf("put if version 0 after a delete: %d, %v (last %d)", v4, err, v3)
	}
	if _, err := c.PutIf(ctx, k, nil, client.Cond{}); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("a zero Cond: %v", err)
	}
}

// TestConditionalCounter: clients increment one counter with read, then
// put-if-version, retrying on a failed condition; the counter ends at the
// number of increments (no lost update), reads one-sided or server-side.
func TestConditionalCounter(t *testing.T) {
	s, store := newTestServer(t)
	waitVersioned(t, s)
	const workers, each = 4, 40
	key := []byte("cas/counter")
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range workers {
		mode := []string{"server", "client"}[i%2]
		c := newClient(t, store, mode)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				for {
					ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
					kv, err := c.GetKV(ctx, key)
					n, ver := 0, uint64(0)
					if err == nil {
						fmt.Sscan(string(kv.Value), &n)
						ver = kv.Version
					} else if !errors.Is(err, client.ErrNotFound) {
						cancel()
						t.Error(err)
						return
					}
					_, err = c.PutIf(ctx, key, []byte(fmt.Sprint(n+1)), client.IfVersion(ver))
					cancel()
					if err == nil {
						break
					}
					if !errors.Is(err, client.ErrConditionFailed) {
						t.Error(err)
						return
					}
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	c := newClient(t, store, "server")
	v, err := c.Get(ctxT(t), key)
	if err != nil || string(v) != fmt.Sprint(workers*each) {
		t.Fatalf("counter %q, %v; want %d", v, err, workers*each)
	}
	if failed.Load() == 0 {
		t.Error("no increment ever lost a race: the test did not exercise the condition")
	}
	t.Logf("%d increments, %d failed conditions retried", workers*each, failed.Load())
}

// casInput and casOutput are one operation of TestCASLinearizable.
type casInput struct {
	kind   string // "get", "cas"
	expect uint64 // cas
	value  string // cas
}

type casOutput struct {
	ok      bool // get: found; cas: succeeded
	value   string
	version uint64
	unknown bool
}

type casState struct {
	value   string
	version uint64 // 0: absent
}

// casModel is one key's register with versions: a successful
// compare-and-set gives a version above the last, a failed one names the
// current version, and a get returns the current value and version. An
// unknown outcome may have applied (with some higher version) or not.
var casModel = porcupine.Model{
	Init: func() any { return casState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(casState), input.(casInput), output.(casOutput)
		switch in.kind {
		case "get":
			return out.ok == (st.version != 0) && (!out.ok || out.value == st.value && out.version == st.version), st
		case "cas":
			if out.unknown {
				if st.version != in.expect {
					return true, st
				}
				return true, casState{value: in.value, version: st.version + 1}
			}
			if !out.ok {
				return st.version != in.expect && out.version == st.version, st
			}
			return st.version == in.expect && out.version > st.version, casState{value: in.value, version: out.version}
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%+v -> %+v", input, output)
	},
}

// TestCASLinearizable: three servers, three replicas; clients put, read
// and compare-and-set a few keys while the region's host stops; every
// key's history (versions included) is linearizable against casModel.
// The model's check can fail: a history whose failed compare names a
// stale version is refused.
func TestCASLinearizable(t *testing.T) {
	bad := []porcupine.Operation{
		{ClientId: 0, Input: casInput{kind: "cas", value: "a"}, Output: casOutput{ok: true, version: 10}, Call: 0, Return: 1},
		{ClientId: 0, Input: casInput{kind: "cas", expect: 3, value: "b"}, Output: casOutput{version: 9}, Call: 2, Return: 3},
	}
	if porcupine.CheckOperations(casModel, bad) {
		t.Fatal("the CAS model accepts a failed compare that names a stale version")
	}

	srvs, store := startReplicated(t, 3, 3, func(i int, o *Options) { o.SplitPlacement = PlaceLocal })
	waitVersioned(t, srvs[0])
	keys := []string{"lin/a", "lin/b", "lin/c"}
	var (
		mu      sync.Mutex
		history = map[string][]porcupine.Operation{}
		base    = time.Now()
	)
	record := func(client int, key string, in casInput, out casOutput, call time.Time) {
		mu.Lock()
		history[key] = append(history[key], porcupine.Operation{ClientId: client, Input: in, Output: out,
			Call: int64(call.Sub(base)), Return: int64(time.Since(base))})
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var casOK, casFailed atomic.Int64
	for w := range 4 {
		c := newClient(t, store, []string{"server", "client"}[w%2])
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			last := map[string]uint64{}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[rng.IntN(len(keys))]
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				call := time.Now()
				switch rng.IntN(2) {
				case 0:
					kv, err := c.GetKV(ctx, []byte(key))
					switch {
					case err == nil:
						last[key] = kv.Version
						record(w, key, casInput{kind: "get"}, casOutput{ok: true, value: string(kv.Value), version: kv.Version}, call)
					case errors.Is(err, client.ErrNotFound):
						record(w, key, casInput{kind: "get"}, casOutput{}, call)
					}
				default:
					val := fmt.Sprintf("c%d-%d", w, i)
					in := casInput{kind: "cas", expect: last[key], value: val}
					v, err := c.PutIf(ctx, []byte(key), []byte(val), client.IfVersion(last[key]))
					var cf *client.ConditionFailedError
					switch {
					case err == nil:
						casOK.Add(1)
						last[key] = v
						record(w, key, in, casOutput{ok: true, version: v}, call)
					case errors.As(err, &cf):
						casFailed.Add(1)
						last[key] = cf.Version
						record(w, key, in, casOutput{version: cf.Version}, call)
					case errors.Is(err, client.ErrOutcomeUnknown):
						record(w, key, in, casOutput{unknown: true}, call)
					}
				}
				cancel()
			}
		}()
	}
	time.Sleep(time.Second)
	if err := srvs[0].Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	if casOK.Load() == 0 || casFailed.Load() == 0 {
		t.Fatalf("%d compares held and %d failed: the test needs both", casOK.Load(), casFailed.Load())
	}
	end := int64(time.Since(base)) + 1
	for _, key := range keys {
		h := history[key]
		for i := range h {
			if h[i].Output.(casOutput).unknown {
				h[i].Return = end
			}
		}
		if !porcupine.CheckOperations(casModel, h) {
			t.Fatalf("%s: %d operations not linearizable", key, len(h))
		}
	}
	t.Logf("%d compares held, %d failed", casOK.Load(), casFailed.Load())
}

// TestBadCondRequests: a conditional write that is not well formed is
// refused BadRequest, one with too large a value ValueTooLarge, and one
// to a region without versions yet NotVersioned; nothing changes and the
// connection stays usable.
func TestBadCondRequests(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.TestingKnobs.NoVersions = true })
	c := dial(t, s)
	put(t, c, "keep", "me")
	raw := func(body string) wire.Message { return rawBody(body) }
	for _, tc := range []struct {
		name string
		req  wire.Message
		st   wire.Status
	}{
		{"unknown op", raw("0000000000000000 0000000000000000 0000000000000000 0000000000000000 07 04 00 00 0000000000000000 04000000 6b656570 00000000 00000000"), wire.StatusBadRequest},
		{"compare on presence", raw("0000000000000000 0000000000000000 0000000000000000 0000000000000000 01 04 01 00 0000000000000000 04000000 6b656570 00000000 00000000"), wire.StatusBadRequest},
		{"value too large", &wire.CondRequest{Op: wire.CondPut, Target: wire.CondAbsent, Key: []byte("keep"), Value: make([]byte, wire.MaxValueSize+1)}, wire.StatusValueTooLarge},
		{"empty key", &wire.CondRequest{Op: wire.CondPut, Target: wire.CondAbsent, Value: []byte("v")}, wire.StatusEmptyKey},
		{"no versions yet", &wire.CondRequest{Op: wire.CondDelete, Target: wire.CondPresent, Key: []byte("keep")}, wire.StatusNotVersioned},
	} {
		_, err := call(t, c, wire.OpCondWrite, tc.req, &wire.CondReply{})
		if got := wire.StatusOf(err); got != tc.st {
			t.Errorf("%s: status %v (%v), want %v", tc.name, got, err, tc.st)
		}
	}
	if v, ok := get(t, c, "keep"); !ok || v != "me" {
		t.Fatalf("keep = %q, %v after bad conditional writes", v, ok)
	}
}

// rawBody is a request body given in hexadecimal (spaces ignored).
type rawBody string

func (r rawBody) AppendTo(b []byte) []byte {
	h, err := hex.DecodeString(strings.ReplaceAll(string(r), " ", ""))
	if err != nil {
		panic(err)
	}
	return append(b, h...)
}

func (r rawBody) Decode([]byte) error { return nil }
