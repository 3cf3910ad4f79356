package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/server/rsm"
)

// slowSink is a raft.SnapshotSink in memory that sleeps on every write,
// so that writes to the region go on while a snapshot is written.
type slowSink struct {
	bytes.Buffer
	delay    time.Duration
	closed   bool
	canceled bool
}

func (s *slowSink) Write(b []byte) (int, error) {
	time.Sleep(s.delay)
	return s.Buffer.Write(b)
}
func (s *slowSink) Close() error  { s.closed = true; return nil }
func (s *slowSink) Cancel() error { s.canceled = true; return nil }
func (s *slowSink) ID() string    { return "slow" }

// TestSnapshotWhileWriting: a snapshot holds writes only while it starts
// (fsm.go: the replicated state encoded, the region's copy-on-write
// capture begun); its image is written while puts, deletes and meganode
// splits go on, and it is byte for byte the region as it was at the
// snapshot's index — the image a stop-the-world copy made at that moment.
func TestSnapshotWhileWriting(t *testing.T) {
	var (
		refMu sync.Mutex
		ref   []byte
	)
	s, store := newTestServer(t, func(o *Options) {
		o.SplitPlacement = PlaceLocal
		o.MeganodeSize = 64 << 10 // 64 nodes of 1 KiB: splits come soon
		o.SnapshotThreshold = 1 << 40
		o.TestingKnobs.OnSnapshot = func(r *meganode.Region) {
			var b bytes.Buffer
			if _, err := r.WriteImage(&b); err != nil {
				t.Error(err)
			}
			refMu.Lock()
			ref = b.Bytes()
			refMu.Unlock()
		}
	})
	c := newClient(t, store, "server")
	putRange(t, c, 0, 300)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes int
	wg.Go(func() {
		for i := 300; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Appendf(nil, "key%06d", i*7919%100003)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			err := c.Put(ctx, k, bytes.Repeat([]byte{byte(i)}, 1+i%700))
			if err == nil && i%5 == 0 {
				err = c.Delete(ctx, fmt.Appendf(nil, "key%06d", (i-100)*7919%100003))
				if errors.Is(err, client.ErrNotFound) {
					err = nil
				}
			}
			cancel()
			if err != nil {
				t.Errorf("write %d: %v", i, err)
				return
			}
			writes++
		}
	})
	splitsBefore := metricValue(gather(t, s), "cell_server_meganode_splits_total", map[string]string{"result": "done"})
	savedRounds := 0
	splits := func() float64 {
		return metricValue(gather(t, s), "cell_server_meganode_splits_total", map[string]string{"result": "done"}) - splitsBefore
	}
	// Four rounds at least, and more until a split ran meanwhile (a slow
	// machine writes less between two rounds).
	for round := 0; round < 4 || splits() == 0 && round < 40; round++ {
		time.Sleep(200 * time.Millisecond)
		snap, err := (*fsm)(s.reps.own).Snapshot()
		if errors.Is(err, rsm.ErrSnapshotLater) {
			t.Logf("round %d: %v", round, err) // a split was in progress
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sink := &slowSink{delay: 2 * time.Millisecond}
		err = snap.Persist(sink)
		snap.Release()
		if err != nil || !sink.closed {
			t.Fatalf("round %d: persist: %v (closed %v)", round, err, sink.closed)
		}
		br := bytes.NewReader(sink.Bytes())
		st, err := rsm.ReadState(br)
		if err != nil {
			t.Fatal(err)
		}
		img, _ := io.ReadAll(br)
		refMu.Lock()
		want := ref
		refMu.Unlock()
		if !bytes.Equal(img, want) {
			t.Fatalf("round %d: the snapshot's image (%d bytes, index %d) is not the region at its index (%d bytes)", round, len(img), st.Applied, len(want))
		}
		saved := metricValue(gather(t, s), "cell_server_snapshot_saved_bytes", nil)
		t.Logf("round %d: index %d, %d bytes of image, %.0f bytes saved by writes meanwhile", round, st.Applied, len(img), saved)
		if saved > 0 {
			savedRounds++
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d writes, %.0f splits while snapshotting", writes, splits())
	if savedRounds == 0 {
		t.Fatal("no write saved a page while a snapshot was written: the test did not overlap them")
	}
	if splits() == 0 {
		t.Fatal("no meganode split while snapshotting")
	}
}

// TestSnapshotForLogBytes: a region snapshots once the records it applied
// since its last snapshot add up to Options.SnapshotLogBytes, though
// their count is far below SnapshotThreshold, and its log is truncated
// behind the snapshot to TrailingLogs entries: large values do not grow
// the log by the threshold's count of them.
func TestSnapshotForLogBytes(t *testing.T) {
	snaps := make(chan struct{}, 16)
	s, store := newTestServer(t, func(o *Options) {
		o.SnapshotThreshold = 1 << 40
		o.SnapshotLogBytes = 256 << 10
		o.TrailingLogs = 8
		o.TestingKnobs.OnSnapshot = func(*meganode.Region) { snaps <- struct{}{} }
	})
	c := newClient(t, store, "server")
	logStore := s.wal.Log(s.reps.own.regionID)
	first := func() uint64 {
		i, err := logStore.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	val := bytes.Repeat([]byte("v"), 8<<10)
	for i := range 20 { // 160 KiB: under the threshold
		if err := c.Put(ctxT(t), fmt.Appendf(nil, "k%03d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * replicaInterval)
	select {
	case <-snaps:
		t.Fatal("a snapshot before the log reached SnapshotLogBytes")
	default:
	}
	if f := first(); f != 1 {
		t.Fatalf("log truncated to %d before any snapshot", f)
	}
	for i := 20; i < 40; i++ { // 320 KiB in all
		if err := c.Put(ctxT(t), fmt.Appendf(nil, "k%03d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-snaps:
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot after the log passed SnapshotLogBytes")
	}
	waitFor(t, func() bool { return first() > 1 }, "the log truncated behind the snapshot")
	last, err := logStore.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if f := first(); last-f+1 > 8+1 {
		t.Fatalf("log [%d, %d] after the snapshot: more than TrailingLogs (8) entries kept", f, last)
	}
	if b := s.reps.own.logBytes.Load(); b >= 256<<10 {
		t.Fatalf("%d bytes counted after the snapshot", b)
	}
}
