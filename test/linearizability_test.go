package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/locality"
)

// The KV model for porcupine: per key, absent or one value. Operations:
// get (value and found), contains (found), put (always applies), delete
// (found or not). A write whose outcome is unknown (client.ErrOutcomeUnknown)
// is recorded as pending to the end of the history, so the checker may
// linearize it anywhere after its call, including after every read (never
// observed).

type kvOp uint8

const (
	opGet kvOp = iota
	opContains
	opPut
	opDelete
)

var kvOpNames = [...]string{"get", "contains", "put", "delete"}

func (o kvOp) String() string { return kvOpNames[o] }

type kvInput struct {
	Op    kvOp   `json:"op"`
	Key   string `json:"key"`
	Value string `json:"value,omitempty"` // put
}

type kvOutput struct {
	Found   bool   `json:"found"` // get, contains; delete: the key was there
	Value   string `json:"value,omitempty"`
	Unknown bool   `json:"unknown,omitempty"` // a write whose outcome is unknown
}

// kvState is one key's state; comparable, so porcupine's == works.
type kvState struct {
	present bool
	value   string
}

var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return kvState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(kvState), input.(kvInput), output.(kvOutput)
		switch in.Op {
		case opGet:
			return out.Found == st.present && (!out.Found || out.Value == st.value), st
		case opContains:
			return out.Found == st.present, st
		case opPut:
			return true, kvState{present: true, value: in.Value}
		case opDelete:
			if out.Unknown {
				return true, kvState{}
			}
			return out.Found == st.present, kvState{}
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		switch {
		case out.Unknown:
			return fmt.Sprintf("%s(%s, %.24q) -> unknown", in.Op, in.Key, in.Value)
		case in.Op == opGet && out.Found:
			return fmt.Sprintf("get(%s) -> %.24q", in.Key, out.Value)
		case in.Op == opPut:
			return fmt.Sprintf("put(%s, %.24q)", in.Key, in.Value)
		}
		return fmt.Sprintf("%s(%s) -> found=%v", in.Op, in.Key, out.Found)
	},
	DescribeState: func(state any) string {
		st := state.(kvState)
		if !st.present {
			return "absent"
		}
		return fmt.Sprintf("%.24q", st.value)
	},
}

// recorder collects a history; each goroutine appends its own slice.
type recorder struct {
	base time.Time
	mu   sync.Mutex
	ops  []porcupine.Operation
}

func (r *recorder) now() int64 { return int64(time.Since(r.base)) }

func (r *recorder) add(ops []porcupine.Operation) {
	r.mu.Lock()
	r.ops = append(r.ops, ops...)
	r.mu.Unlock()
}

// pending marks the return of an operation whose outcome is unknown; it
// becomes the end of the history before checking.
const pending = math.MaxInt64

// history returns the operations, pending ones returning after all others.
func (r *recorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := int64(0)
	for _, op := range r.ops {
		if op.Return != pending {
			end = max(end, op.Return)
		}
	}
	out := append([]porcupine.Operation(nil), r.ops...)
	for i := range out {
		if out[i].Return == pending {
			out[i].Return = end + 1
		}
	}
	return out
}

// checkLinearizable checks the history with porcupine; on failure (or a
// timed-out check) it saves the visualization and the raw history.
func checkLinearizable(t *testing.T, history []porcupine.Operation) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(kvModel, history, 60*time.Second)
	if res == porcupine.Ok {
		return
	}
	dir := os.Getenv("CELL_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	name := strings.NewReplacer("/", "_", "=", "").Replace(t.Name())
	html := filepath.Join(dir, name+"-history.html")
	if err := porcupine.VisualizePath(kvModel, info, html); err != nil {
		t.Logf("visualization: %v", err)
	}
	raw, _ := json.MarshalIndent(history, "", " ")
	rawPath := filepath.Join(dir, name+"-history.json")
	_ = os.WriteFile(rawPath, raw, 0o644)
	t.Errorf("history of %d operations: porcupine says %s; visualization %s, history %s (set CELL_TEST_ARTIFACTS to keep them)",
		len(history), res, html, rawPath)
}

// linWorkload sizes one run.
type linWorkload struct {
	keys, writers, readers, opsEach int
	bulk                            int // keys stored first, so that the tree has several levels
}

// Concurrent writers and readers in every search mode and with both
// one-sided providers, against one cellserver whose tree has several
// levels and keeps splitting around the keys under test (a churn writer
// inserts and deletes keys next to them): per-key histories are checked
// for linearizability with porcupine, the final state against a model
// (every writer's own key holds its last acknowledged write; a range over
// the run's keys returns what final gets return), and the clients'
// counters against the mode (server: no client-side hop; client: no
// server-side hop; ratio=50: both).
func TestLinearizable(t *testing.T) {
	srv := startServer(t, serverOptions{cores: 2})
	w := linWorkload{keys: 6, writers: 3, readers: 3, opsEach: 1500, bulk: 10000}
	if testing.Short() {
		w.opsEach, w.bulk = 300, 3000
	}
	bulkLoad(t, srv, "lin/bulk/", w.bulk)
	for _, mode := range []string{"adaptive", "server", "client", "ratio=50"} {
		for _, provider := range []string{client.ProviderTCP, client.ProviderSHM} {
			t.Run(mode+"/"+provider, func(t *testing.T) {
				runLinearizable(t, srv, mode, provider, w)
			})
		}
	}
}

// The same with meganodes of 256 nodes, so that the bulk load leaves
// several leaf meganodes under an inner root meganode and the churn keeps
// splitting meganodes while the histories are recorded: searches hop
// between meganodes, server-side and client-side.
func TestLinearizableAcrossMeganodes(t *testing.T) {
	srv := startServer(t, serverOptions{cores: 2, meganodeSize: "256KiB"})
	w := linWorkload{keys: 6, writers: 3, readers: 3, opsEach: 800, bulk: 4000}
	if testing.Short() {
		w.opsEach = 200
	}
	bulkLoad(t, srv, "lin/bulk/", w.bulk)
	for _, run := range []struct{ mode, provider string }{
		{"adaptive", client.ProviderTCP}, {"server", client.ProviderSHM}, {"client", client.ProviderTCP}, {"client", client.ProviderSHM}, {"ratio=50", client.ProviderSHM},
	} {
		t.Run(run.mode+"/"+run.provider, func(t *testing.T) {
			runLinearizable(t, srv, run.mode, run.provider, w)
		})
	}
	st := srv.statusJSON(t)
	levels := map[int]int{}
	for _, m := range st.Servers[0].Meganodes {
		levels[m.Level]++
	}
	t.Logf("meganodes by level: %v", levels)
	if levels[0] < 2 || levels[1] < 1 {
		t.Errorf("meganodes by level %v: want several leaf meganodes under an inner one", levels)
	}
}

func runLinearizable(t *testing.T, srv *cellServer, modeName, provider string, w linWorkload) {
	mode, err := locality.ParseMode(modeName)
	if err != nil {
		t.Fatal(err)
	}
	// Two clients, each with its own caches and selector; goroutines
	// alternate between them.
	var clients [2]*client.Client
	for i := range clients {
		clients[i] = srv.newClient(t, func(c *client.Config) {
			c.Mode = mode
			c.Provider = provider
			c.Selector.Seed = uint64(i + 1)
		})
	}
	prefix := fmt.Sprintf("lin/%s/%s/", modeName, provider)
	shared := make([]string, w.keys)
	for i := range shared {
		shared[i] = fmt.Sprintf("%sshared/%02d", prefix, i)
	}
	own := func(writer int) string { return fmt.Sprintf("%sown/%02d", prefix, writer) }
	all := append([]string(nil), shared...)
	for i := range w.writers {
		all = append(all, own(i))
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	rec := &recorder{base: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	churnDone := make(chan struct{})
	stopChurn := make(chan struct{})
	go func() {
		defer close(churnDone)
		churn(ctx, t, clients[0], shared, seed, stopChurn)
	}()
	lastOwn := make([]*string, w.writers) // the model of each own key; nil: absent
	unknownOwn := make([]bool, w.writers)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var errs []error
	fail := func(err error) {
		errMu.Lock()
		if len(errs) < 10 {
			errs = append(errs, err)
		}
		errMu.Unlock()
	}
	for g := range w.writers + w.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%2]
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			var ops []porcupine.Operation
			writer := g < w.writers
			for i := range w.opsEach {
				var in kvInput
				switch {
				case writer && rng.IntN(4) == 0:
					// The writer's own key: a put, sequential model.
					in = kvInput{Op: opPut, Key: own(g), Value: linValue(rng, g, i)}
				case writer && rng.IntN(3) == 0:
					in = kvInput{Op: opDelete, Key: shared[rng.IntN(len(shared))]}
				case writer:
					in = kvInput{Op: opPut, Key: shared[rng.IntN(len(shared))], Value: linValue(rng, g, i)}
				case rng.IntN(4) == 0:
					in = kvInput{Op: opContains, Key: all[rng.IntN(len(all))]}
				default:
					in = kvInput{Op: opGet, Key: all[rng.IntN(len(all))]}
				}
				op, err := doOp(ctx, rec, c, g, in)
				if err != nil {
					fail(fmt.Errorf("client %d: %s %q: %w", g, in.Op, in.Key, err))
				}
				if op == nil {
					continue
				}
				ops = append(ops, *op)
				if writer && in.Key == own(g) {
					if op.Output.(kvOutput).Unknown {
						unknownOwn[g] = true
					} else {
						v := in.Value
						lastOwn[g], unknownOwn[g] = &v, false
					}
				}
			}
			rec.add(ops)
		}()
	}
	wg.Wait()
	close(stopChurn)
	<-churnDone
	for _, err := range errs {
		t.Error(err)
	}

	// Final reads, after every write returned: part of the history too.
	final := map[string]*string{}
	var finalOps []porcupine.Operation
	for _, k := range all {
		op, err := doOp(ctx, rec, clients[0], w.writers+w.readers, kvInput{Op: opGet, Key: k})
		if err != nil || op == nil {
			t.Fatalf("final get %q: %v", k, err)
		}
		finalOps = append(finalOps, *op)
		if out := op.Output.(kvOutput); out.Found {
			final[k] = &out.Value
		}
	}
	rec.add(finalOps)
	checkLinearizable(t, rec.history())

	// The model: each own key holds its writer's last acknowledged put.
	for g := range w.writers {
		got, want := final[own(g)], lastOwn[g]
		if unknownOwn[g] {
			continue
		}
		if (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("own key of writer %d = %v, want its last put %v", g, deref(got), deref(want))
		}
	}
	// A range over the run's keys agrees with the final gets.
	pairs, resume, err := clients[1].Range(ctx, []byte(prefix), prefixEnd(prefix), client.RangeOptions{})
	if err != nil || resume != nil {
		t.Fatalf("range: %v (resume %q)", err, resume)
	}
	inRun := map[string]bool{}
	for _, k := range all {
		inRun[k] = true
	}
	n := 0
	for i, kv := range pairs {
		if i > 0 && string(pairs[i-1].Key) >= string(kv.Key) {
			t.Errorf("range out of order at %d: %q after %q", i, kv.Key, pairs[i-1].Key)
		}
		if !inRun[string(kv.Key)] {
			continue // a churn key
		}
		n++
		if v, ok := final[string(kv.Key)]; !ok || *v != string(kv.Value) {
			t.Errorf("range pair %d: %q = %.24q, final get %v", i, kv.Key, kv.Value, deref(v))
		}
	}
	if n != len(final) {
		t.Errorf("range returned %d of the run's keys, final gets found %d", n, len(final))
	}

	// The mode shows in the clients' hops.
	var sh, ch, reads uint64
	retries := map[string]uint64{}
	for _, c := range clients {
		st := c.Stats()
		sh += st.ServerHops
		ch += st.ClientHops
		reads += st.Reads
		for k, v := range st.Retries {
			if v > 0 {
				retries[k] += v
			}
		}
	}
	t.Logf("%d operations; meganode hops: %d server-side, %d client-side (%d one-sided reads); retries %v", len(rec.ops), sh, ch, reads, retries)
	switch mode.Kind {
	case locality.ServerOnly:
		if ch != 0 || sh == 0 {
			t.Errorf("server mode: %d server-side and %d client-side hops", sh, ch)
		}
	case locality.ClientOnly:
		if sh != 0 || ch == 0 {
			t.Errorf("client mode: %d server-side and %d client-side hops", sh, ch)
		}
	case locality.Ratio:
		if sh == 0 || ch == 0 {
			t.Errorf("ratio=50: %d server-side and %d client-side hops", sh, ch)
		}
	default:
		if sh+ch == 0 {
			t.Error("adaptive: no hops")
		}
	}
}

// bulkLoad stores n keys under prefix with a few concurrent writers.
func bulkLoad(t *testing.T, srv *cellServer, prefix string, n int) {
	t.Helper()
	c := srv.newClient(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 4 {
				if err := c.Put(ctx, fmt.Appendf(nil, "%s%06d", prefix, i), fmt.Appendf(nil, "bulk value %d", i)); err != nil {
					errs <- fmt.Errorf("bulk put %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// churn inserts keys just after the shared keys (so that the leaves and
// inner nodes holding them split under the readers) and deletes some,
// until stop is closed. Its keys are not in the checked history.
func churn(ctx context.Context, t *testing.T, c *client.Client, shared []string, seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, 1<<40))
	var keys [][]byte
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		var err error
		if len(keys) > 0 && rng.IntN(4) == 0 {
			j := rng.IntN(len(keys))
			err = c.Delete(ctx, keys[j])
			keys[j] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
		} else {
			k := fmt.Appendf(nil, "%s~churn%05d", shared[rng.IntN(len(shared))], i)
			keys = append(keys, k)
			err = c.Put(ctx, k, []byte(strings.Repeat("c", rng.IntN(200))))
		}
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			t.Errorf("churn: %v", err)
			return
		}
	}
}

// doOp performs one operation and returns its record: nil for an
// operation that certainly had no effect and returned nothing (a read or
// a write that failed unexecuted), with the error. Unknown-outcome writes
// are recorded as pending, with their error.
func doOp(ctx context.Context, rec *recorder, c *client.Client, id int, in kvInput) (*porcupine.Operation, error) {
	op := &porcupine.Operation{ClientId: id, Input: in, Call: rec.now()}
	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var out kvOutput
	var err error
	key := []byte(in.Key)
	switch in.Op {
	case opGet:
		var v []byte
		v, err = c.Get(octx, key)
		out = kvOutput{Found: err == nil, Value: string(v)}
	case opContains:
		out.Found, err = c.Contains(octx, key)
	case opPut:
		err = c.Put(octx, key, []byte(in.Value))
	case opDelete:
		err = c.Delete(octx, key)
		out.Found = err == nil
	}
	op.Return = rec.now()
	if errors.Is(err, client.ErrNotFound) && (in.Op == opGet || in.Op == opDelete) {
		out.Found, out.Value, err = false, "", nil
	}
	switch {
	case err == nil:
		op.Output = out
		return op, nil
	case errors.Is(err, client.ErrOutcomeUnknown) && (in.Op == opPut || in.Op == opDelete):
		op.Output, op.Return = kvOutput{Unknown: true}, pending
		return op, err
	}
	return nil, err
}

// linValue returns a unique value; some are large, so that records move
// between extent sizes.
func linValue(rng *rand.Rand, writer, seq int) string {
	v := fmt.Sprintf("w%d-%d-", writer, seq)
	n := rng.IntN(48)
	if rng.IntN(10) == 0 {
		n = 1000 + rng.IntN(3000)
	}
	return v + strings.Repeat(string(rune('a'+seq%26)), n)
}

// prefixEnd is the first key after every key that starts with p.
func prefixEnd(p string) []byte {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return b[:i+1]
		}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return "<absent>"
	}
	return fmt.Sprintf("%.24q", *s)
}
