package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/cellstore/cell/wire"
)

// Writers on several connections and workers, readers alongside: every
// value a reader sees is one a writer wrote for that key (or the key is
// absent), and the final contents equal each writer's last writes.
func TestConcurrentClients(t *testing.T) {
	s, _ := newTestServer(t, func(o *Options) { o.Cores = 2 })
	const writers, readers, keysPer, rounds = 4, 4, 50, 6
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	final := make([]map[string]string, writers)
	for w := range writers {
		final[w] = map[string]string{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial(t, s)
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for r := range rounds {
				for k := range keysPer {
					key := fmt.Sprintf("w%d-k%03d", w, k)
					if rng.IntN(5) == 0 {
						_, err := call(t, c, wire.OpDelete, &wire.DeleteRequest{Key: []byte(key)}, nil)
						if err != nil && wire.StatusOf(err) != wire.StatusNotFound {
							t.Error(err)
							return
						}
						delete(final[w], key)
						continue
					}
					val := fmt.Sprintf("%s=r%d:%s", key, r, strings.Repeat("x", rng.IntN(3000)))
					if _, err := call(t, c, wire.OpPut, &wire.PutRequest{Key: []byte(key), Value: []byte(val)}, nil); err != nil {
						t.Error(err)
						return
					}
					final[w][key] = val
				}
			}
		}()
	}
	stop := make(chan struct{})
	var rg sync.WaitGroup
	for r := range readers {
		rg.Add(1)
		go func() {
			defer rg.Done()
			c := dial(t, s)
			rng := rand.New(rand.NewPCG(seed, 100+uint64(r)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-k%03d", rng.IntN(writers), rng.IntN(keysPer))
				switch rng.IntN(3) {
				case 0:
					var rep wire.SearchReply
					if _, err := call(t, c, wire.OpSearch, &wire.SearchRequest{Key: []byte(key), WantValue: true}, &rep); err != nil {
						t.Error(err)
						return
					}
					if rep.HasValue && !strings.HasPrefix(string(rep.Value), key+"=") {
						t.Errorf("search %q returned %.40q", key, rep.Value)
					}
				case 1:
					var rep wire.GetReply
					_, err := call(t, c, wire.OpGet, &wire.GetRequest{Key: []byte(key)}, &rep)
					if err != nil && wire.StatusOf(err) != wire.StatusNotFound {
						t.Error(err)
						return
					}
					if err == nil && !strings.HasPrefix(string(rep.Value), key+"=") {
						t.Errorf("get %q returned %.40q", key, rep.Value)
					}
				case 2:
					var rep wire.RangeReply
					if _, err := call(t, c, wire.OpRange, &wire.RangeRequest{Start: []byte(key), EndUnbounded: true, Limit: 20}, &rep); err != nil {
						t.Error(err)
						return
					}
					for i, kv := range rep.Pairs {
						if !bytes.HasPrefix(kv.Value, append(bytes.Clone(kv.Key), '=')) || i > 0 && bytes.Compare(rep.Pairs[i-1].Key, kv.Key) >= 0 {
							t.Errorf("range pair %q=%.40q out of order or mismatched", kv.Key, kv.Value)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rg.Wait()
	c := dial(t, s)
	got, _ := scanAll(t, c, wire.RangeRequest{StartUnbounded: true, EndUnbounded: true})
	want := map[string]string{}
	for _, m := range final {
		for k, v := range m {
			want[k] = v
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys, want %d", len(got), len(want))
	}
	for _, kv := range got {
		if want[string(kv.Key)] != string(kv.Value) {
			t.Fatalf("%q = %.40q, want %.40q", kv.Key, kv.Value, want[string(kv.Key)])
		}
	}
	if err := rootTree(t, s).CheckErr(); err != nil {
		t.Fatal(err)
	}
	if err := s.reps.own.sm.Region().Check(); err != nil {
		t.Fatal(err)
	}
}
