package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// growKey is the i-th key of the growing writers: long, so that leaves
// hold few of them and tiny meganodes split often, and scattered.
func growKey(i int) string {
	h := uint64(i) * 0x9e3779b97f4a7c15
	return fmt.Sprintf("grow/%016x/%s", h, strings.Repeat("k", 48))
}

func growValue(key string) string { return "v:" + key[5:21] }

// ackedSet is the growing writers' keys: attempted (a put was sent) and
// acknowledged.
type ackedSet struct {
	mu        sync.Mutex
	acked     []string
	attempted map[string]bool
}

func (a *ackedSet) attempt(k string) {
	a.mu.Lock()
	a.attempted[k] = true
	a.mu.Unlock()
}

func (a *ackedSet) ack(k string) {
	a.mu.Lock()
	a.acked = append(a.acked, k)
	a.mu.Unlock()
}

func (a *ackedSet) snapshot() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.acked)
}

// pick returns one acknowledged key at random, or false if none is yet:
// a reader's next key, without copying the set (snapshot does, and six
// readers copying 24,000 keys for every get slowed the whole test).
func (a *ackedSet) pick(rng *rand.Rand) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.acked) == 0 {
		return "", false
	}
	return a.acked[rng.IntN(len(a.acked))], true
}

func (a *ackedSet) wasAttempted(k string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attempted[k]
}

// TestClusterSplits: three cellservers with 128 KiB meganodes; writers
// grow the tree through many meganode splits, local and remote (paper
// §2.2), and at least two levels of meganodes, while readers in every
// search mode and with both one-sided providers check that every
// acknowledged key is found with its value and that range scans return
// exactly the keys they must, in order; per-key histories recorded
// meanwhile are checked for linearizability with porcupine.
func TestClusterSplits(t *testing.T) {
	srvs := startCluster(t, 3, serverOptions{cores: 1, regionSize: "32MiB", meganodeSize: "128KiB"}).servers
	growers, target := 4, 24000
	if testing.Short() {
		target = 16000
	}
	set := &ackedSet{attempted: map[string]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var errMu sync.Mutex
	var errs []error
	fail := func(err error) {
		errMu.Lock()
		if len(errs) < 20 {
			errs = append(errs, err)
		}
		errMu.Unlock()
	}

	// Writers: unique keys until target.
	w := srvs[0].newClient(t, nil)
	var writers sync.WaitGroup
	for g := range growers {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := g; i < target && ctx.Err() == nil; i += growers {
				k := growKey(i)
				set.attempt(k)
				if err := w.Put(ctx, []byte(k), []byte(growValue(k))); err != nil {
					fail(fmt.Errorf("grow put %q: %w", k, err))
					return
				}
				set.ack(k)
			}
		}()
	}
	growing := make(chan struct{})
	go func() { writers.Wait(); close(growing) }()

	// Readers in every mode and with both providers, while the tree grows.
	var readers sync.WaitGroup
	for _, mode := range []string{"server", "client", "adaptive"} {
		for _, provider := range []string{client.ProviderTCP, client.ProviderSHM} {
			m, err := locality.ParseMode(mode)
			if err != nil {
				t.Fatal(err)
			}
			c := srvs[1].newClient(t, func(cfg *client.Config) { cfg.Mode, cfg.Provider = m, provider })
			readers.Add(1)
			go func() {
				defer readers.Done()
				rng := rand.New(rand.NewPCG(uint64(len(mode)), uint64(len(provider))))
				for n := 0; ; n++ {
					select {
					case <-growing:
						return
					default:
					}
					if n%50 == 49 {
						if err := checkScan(ctx, c, set, rng); err != nil {
							fail(fmt.Errorf("%s/%s: %w", mode, provider, err))
							return
						}
						continue
					}
					k, ok := set.pick(rng)
					if !ok {
						time.Sleep(time.Millisecond)
						continue
					}
					v, err := c.Get(ctx, []byte(k))
					if err != nil || string(v) != growValue(k) {
						fail(fmt.Errorf("%s/%s: get of acknowledged %q = %q, %v", mode, provider, k, v, err))
						return
					}
				}
			}()
		}
	}

	// Per-key histories for porcupine, in two modes, while it grows.
	for _, run := range []struct{ mode, provider string }{{"adaptive", client.ProviderSHM}, {"client", client.ProviderTCP}} {
		t.Run("linearizable/"+run.mode+"/"+run.provider, func(t *testing.T) {
			runLinearizable(t, srvs[2], run.mode, run.provider, linWorkload{keys: 6, writers: 3, readers: 3, opsEach: 300})
		})
	}
	<-growing
	readers.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	// At rest: every key in every mode, and whole scans both ways.
	acked := set.snapshot()
	slices.Sort(acked)
	for _, mode := range []string{"server", "client"} {
		m, _ := locality.ParseMode(mode)
		c := srvs[2].newClient(t, func(cfg *client.Config) { cfg.Mode = m })
		for _, k := range acked {
			v, err := c.Get(ctx, []byte(k))
			if err != nil || string(v) != growValue(k) {
				t.Fatalf("%s: get %q = %q, %v", mode, k, v, err)
			}
		}
		for _, rev := range []bool{false, true} {
			got, err := scanKeys(ctx, c, []byte("grow/"), []byte("grow0"), rev)
			if err != nil {
				t.Fatal(err)
			}
			if rev {
				slices.Reverse(got)
			}
			if !slices.Equal(got, acked) {
				t.Fatalf("%s: scan (reverse %v) returned %d keys, want %d", mode, rev, len(got), len(acked))
			}
		}
	}

	// The tree: enough splits, remote ones among them, two levels.
	done, remote := 0.0, 0.0
	for _, s := range srvs {
		m := scrape(t, s)
		done += m.value("cell_server_meganode_splits_total", "result", "done")
		remote += m.value("cell_server_meganode_splits_total", "result", "remote")
	}
	levels := map[uint16]int{}
	for _, s := range srvs {
		rep := metadata(t, s)
		for _, mn := range rep.Meganodes {
			levels[mn.Level]++
		}
		t.Logf("%s: %d meganodes", s.id, len(rep.Meganodes))
	}
	t.Logf("%d keys, %v splits (%v remote), meganodes by level %v", len(acked), done, remote, levels)
	if done < 50 || remote < 1 || levels[1] < 1 {
		t.Errorf("%v splits, %v remote, levels %v: want >= 50 splits, remote ones, >= 2 levels", done, remote, levels)
	}
	// Every server's invariants and the links between meganodes, as an
	// operator checks them.
	code, out, errOut := srvs[0].cellctl(t, "check")
	if code != 0 || !strings.HasPrefix(out, "ok: 3 servers") {
		t.Errorf("cellctl check: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("cellctl check: %s", strings.TrimSpace(out))
}

// checkScan scans a random slice of the growing keys and checks that it
// is ordered, holds every key acknowledged before it started and nothing
// that was never written.
func checkScan(ctx context.Context, c *client.Client, set *ackedSet, rng *rand.Rand) error {
	digit := strconv.FormatInt(int64(rng.IntN(16)), 16)
	start, end := []byte("grow/"+digit), prefixEnd("grow/"+digit)
	before := set.snapshot()
	rev := rng.IntN(2) == 0
	got, err := scanKeys(ctx, c, start, end, rev)
	if err != nil {
		return err
	}
	if rev {
		slices.Reverse(got)
	}
	if !slices.IsSortedFunc(got, strings.Compare) || len(slices.Compact(slices.Clone(got))) != len(got) {
		return fmt.Errorf("scan of %q (reverse %v) is not strictly ordered", start, rev)
	}
	for _, k := range before {
		if bytes.HasPrefix([]byte(k), start) {
			if _, ok := slices.BinarySearch(got, k); !ok {
				return fmt.Errorf("scan of %q (reverse %v) misses acknowledged %q", start, rev, k)
			}
		}
	}
	for _, k := range got {
		if !set.wasAttempted(k) {
			return fmt.Errorf("scan of %q returned %q, never written", start, k)
		}
	}
	return nil
}

// scanKeys returns the keys of [start, end) through the client's Scan.
func scanKeys(ctx context.Context, c *client.Client, start, end []byte, reverse bool) ([]string, error) {
	var out []string
	for kv, err := range c.Scan(ctx, start, end, client.RangeOptions{Reverse: reverse, KeysOnly: true}) {
		if err != nil {
			return out, err
		}
		out = append(out, string(kv.Key))
	}
	return out, nil
}

// metadata asks a server to describe itself and its meganodes. The reply's
// byte fields alias the frame, which is left to the garbage collector.
func metadata(t *testing.T, s *cellServer) wire.MetadataReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := dialWire(t, s).CallMessage(ctx, wire.OpMetadata, &wire.MetadataRequest{WantMeganodes: true})
	if err != nil {
		t.Fatal(err)
	}
	var rep wire.MetadataReply
	if err := rep.Decode(f.Body); err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestClusterKillServer: three servers share a tree grown through remote
// splits; one that does not hold the root is killed (SIGKILL). Keys whose
// leaf meganodes it held fail with a clear, typed error (client
// ErrUnavailable: with one replica per region nobody else holds them);
// every other key is still read and written, by the clients that saw the
// kill and by a new one. Restarted on its data directory, the killed
// server rebuilds its region from its log: every key is served again,
// by the old client and the new one, and the cluster checks clean.
func TestClusterKillServer(t *testing.T) {
	srvs := startCluster(t, 3, serverOptions{cores: 1, regionSize: "32MiB", meganodeSize: "128KiB"}).servers
	// FailFast: the keys of the dead server fail at once instead of
	// waiting for it within their deadline.
	failFast := func(c *client.Config) { c.FailFast = true }
	c := srvs[0].newClient(t, failFast)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 6000
	var keys []string
	for i := range n {
		k := growKey(i)
		if err := c.Put(ctx, []byte(k), []byte(growValue(k))); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
		keys = append(keys, k)
	}
	// The victim: a server with leaf meganodes and not the root.
	var victim *cellServer
	var root uint32
	leaves := map[*cellServer]int{}
	for _, s := range srvs {
		rep := metadata(t, s)
		root = rep.Root.Region()
		for _, mn := range rep.Meganodes {
			if mn.Level == 0 {
				leaves[s]++
			}
		}
		if rep.Regions[0].ID != root && leaves[s] > 0 && victim == nil {
			victim = s
		}
	}
	if victim == nil {
		t.Fatalf("no server holds leaves without the root: leaves %v", leaves)
	}
	t.Logf("killing %s (%d leaf meganodes)", victim.id, leaves[victim])
	victim.kill()
	// Until its membership lease runs out, the table still names the
	// dead server, and a same-host client may even read its region file
	// one-sided (what it reads is the last state the server acknowledged).
	// From then on every client knows the region has no live host.
	store, err := regiontable.OpenEtcd([]string{srvs[0].etcd}, regiontable.EtcdOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ms, err := store.Members(ctx)
		if err == nil && !slices.ContainsFunc(ms, func(m regiontable.Member) bool { return m.ID == victim.id }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still a member 30 s after it was killed", victim.id)
		}
	}
	time.Sleep(500 * time.Millisecond) // the clients' watches

	check := func(name string, c *client.Client) (ok, lost []string) {
		for i, k := range keys {
			if i%5 != 0 {
				continue // a sample keeps the test short
			}
			octx, cancel := context.WithTimeout(ctx, 20*time.Second)
			v, err := c.Get(octx, []byte(k))
			cancel()
			switch {
			case err == nil && string(v) == growValue(k):
				ok = append(ok, k)
			case errors.Is(err, client.ErrUnavailable):
				lost = append(lost, k)
			default:
				t.Fatalf("%s: get %q after the kill: %q, %v (want the value or ErrUnavailable)", name, k, v, err)
			}
		}
		return ok, lost
	}
	okKeys, lost := check("old client", c)
	t.Logf("after the kill: %d keys served, %d unavailable", len(okKeys), len(lost))
	if len(okKeys) == 0 || len(lost) == 0 {
		t.Fatalf("%d keys served, %d unavailable: want both", len(okKeys), len(lost))
	}
	// Writes to the live servers' keys go on.
	for _, k := range okKeys[:50] {
		if err := c.Put(ctx, []byte(k), []byte(growValue(k))); err != nil {
			t.Fatalf("put %q after the kill: %v", k, err)
		}
	}
	// So does a new client, once the dead server's lease is gone or not.
	fresh := srvs[0].newClient(t, failFast)
	ok2, lost2 := check("new client", fresh)
	if len(ok2) != len(okKeys) || len(lost2) != len(lost) {
		t.Fatalf("new client: %d served, %d unavailable; the old one %d and %d", len(ok2), len(lost2), len(okKeys), len(lost))
	}

	victim.restart(t)
	for _, cl := range []struct {
		name string
		c    *client.Client
	}{{"old client", c}, {"new client", fresh}} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			back, still := check(cl.name+" after the restart", cl.c)
			if len(still) == 0 && len(back) == len(okKeys)+len(lost) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d keys still unavailable 30 s after %s restarted", cl.name, len(still), victim.id)
			}
		}
	}
	if code, out, errOut := srvs[0].cellctl(t, "check"); code != 0 {
		t.Fatalf("cellctl check after the restart: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("%s restarted: all %d sampled keys served again", victim.id, len(okKeys)+len(lost))
}
