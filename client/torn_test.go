package client

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/locality"
)

// TestTornCopiesRetried tears node copies and corrupts records as they
// arrive (paper §2.3: mismatched versions mean "the read must be
// retried"; a record whose CRC does not match "is retried"): every get
// still returns the right value, and the retries are counted by cause.
func TestTornCopiesRetried(t *testing.T) {
	const n = 200
	rc := startReal(t, 1, nil)
	for _, provider := range []string{ProviderTCP, ProviderSHM} {
		t.Run(provider, func(t *testing.T) {
			var nodeReads, recReads atomic.Uint64
			cfg := realConfig(t, rc)
			cfg.Mode, cfg.Provider = locality.Mode{Kind: locality.ClientOnly}, provider
			cfg.NodeCacheBytes = -1 // every node is read, so every one can be torn
			cfg.TestingKnobs.AfterNodeRead = func(_ uint64, buf []byte) {
				if nodeReads.Add(1)%3 == 0 {
					// A writer was between its head and tail stores.
					tail := len(buf) - 8
					binary.LittleEndian.PutUint64(buf[tail:], binary.LittleEndian.Uint64(buf[tail:])+1)
				}
			}
			cfg.TestingKnobs.AfterExtentRead = func(_ uint64, buf []byte) {
				if recReads.Add(1)%4 == 0 {
					buf[len(buf)/2] ^= 0x5a
				}
			}
			c := mustClient(t, cfg)
			mustPut(t, c, n)
			getAll(t, c, n)
			st := c.Stats()
			if st.Retry("torn") == 0 || st.Retry("crc") == 0 {
				t.Fatalf("retries %v: want torn and crc retries", st.Retries)
			}
			if st.ServerHops != 0 {
				t.Errorf("%d server hops in client mode", st.ServerHops)
			}
		})
	}
}

// TestTornReadsUnderWriters pauses the servers' writers in the middle of
// publishing nodes (blink's MidNodeWrite knob, on the fixture cluster
// whose trees the test reaches) while client-side readers
// copy the same nodes over shared memory and TCP: readers meet genuinely
// half-written nodes, retry them, and never return a value that was not
// the key's at some point during the read.
func TestTornReadsUnderWriters(t *testing.T) {
	const n = 60
	var pause atomic.Bool
	cl := newTestCluster(t, clusterSpec{})
	for _, m := range cl.megas {
		m.Tree().SetTestingKnobs(blink.TestingKnobs{MidNodeWrite: func(blink.Ptr) {
			if pause.Load() {
				time.Sleep(50 * time.Microsecond)
			}
		}})
	}
	for _, provider := range []string{ProviderTCP, ProviderSHM} {
		t.Run(provider, func(t *testing.T) {
			cfg := testConfig(t, cl)
			cfg.Mode, cfg.Provider = locality.Mode{Kind: locality.ClientOnly}, provider
			c := mustClient(t, cfg)
			pause.Store(true)
			defer pause.Store(false)
			m := runModel(t, c, n, 2, 3, 400*time.Millisecond, 3)
			pause.Store(false)
			checkFinal(t, testCtx(t, 10*time.Second), c, m)
			st := c.Stats()
			t.Logf("retries %v over %d reads", st.Retries, st.Reads)
			if provider == ProviderSHM && st.Retry("torn")+st.Retry("crc") == 0 {
				t.Errorf("no torn copy or CRC mismatch met with writers paused mid-publish")
			}
		})
	}
}

// TestTornValueNeverReturned drives one key through values of different
// lengths while readers read it client-side; each value read must be one
// of the values written (a torn or reused record would show as a mix).
func TestTornValueNeverReturned(t *testing.T) {
	rc := startReal(t, 1, nil)
	cfg := realConfig(t, rc)
	cfg.Mode, cfg.Provider = locality.Mode{Kind: locality.ClientOnly}, ProviderSHM
	c := mustClient(t, cfg)
	ctx := testCtx(t, 20*time.Second)
	k := []byte("hot")
	vals := make([][]byte, 8)
	for i := range vals {
		vals[i] = bytes.Repeat([]byte{byte('a' + i)}, 40+i*97)
	}
	if err := c.Put(ctx, k, vals[0]); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := c.Put(ctx, k, vals[i%len(vals)]); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 3 {
		wg.Go(func() {
			var dst []byte
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				dst, err = c.GetAppend(ctx, dst[:0], k)
				if err != nil {
					t.Error(err)
					return
				}
				ok := false
				for _, v := range vals {
					ok = ok || bytes.Equal(v, dst)
				}
				if !ok {
					t.Errorf("read a value never written: %d bytes %q...", len(dst), dst[:min(len(dst), 16)])
					return
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("retries %v", c.Stats().Retries)
}

// TestCorruptCopiesFail: consistent copies (equal, even versions) that do
// not decode are corruption, not a race: after a few the get fails with
// ErrCorruption instead of retrying forever.
func TestCorruptCopiesFail(t *testing.T) {
	rc := startReal(t, 1, nil)
	cfg := realConfig(t, rc)
	cfg.Mode = locality.Mode{Kind: locality.ClientOnly}
	var corrupt atomic.Bool
	cfg.TestingKnobs.AfterNodeRead = func(_ uint64, buf []byte) {
		if corrupt.Load() {
			binary.LittleEndian.PutUint16(buf[10:], 0xffff) // entry count beyond the node
		}
	}
	c := mustClient(t, cfg)
	mustPut(t, c, 10)
	corrupt.Store(true)
	if _, err := c.Get(testCtx(t, 10*time.Second), key(3)); !errors.Is(err, ErrCorruption) {
		t.Fatalf("Get over corrupt nodes: %v, want ErrCorruption", err)
	}
	corrupt.Store(false)
	getAll(t, c, 10)
}
