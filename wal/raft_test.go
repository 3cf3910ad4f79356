package wal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// countFSM sums the uint64 commands it applies. Its snapshot is the count
// and sum followed by padding derived from them, large enough to span many
// snapshot chunks.
type countFSM struct {
	mu         sync.Mutex
	count, sum uint64
	restores   int
}

const fsmPadding = 50_000

func (f *countFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count++
	f.sum += binary.LittleEndian.Uint64(l.Data)
	return f.count
}

func (f *countFSM) state() (count, sum uint64, restores int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count, f.sum, f.restores
}

func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fsmSnap{f.count, f.sum}, nil
}

func (f *countFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	if len(b) != 16+fsmPadding {
		return fmt.Errorf("snapshot of %d bytes", len(b))
	}
	count, sum := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
	if !bytes.Equal(b[16:], image(count^sum, fsmPadding)) {
		return fmt.Errorf("snapshot padding differs")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count, f.sum = count, sum
	f.restores++
	return nil
}

type fsmSnap struct{ count, sum uint64 }

func (s fsmSnap) Persist(sink raft.SnapshotSink) error {
	b := binary.LittleEndian.AppendUint64(nil, s.count)
	b = binary.LittleEndian.AppendUint64(b, s.sum)
	if _, err := sink.Write(append(b, image(s.count^s.sum, fsmPadding)...)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnap) Release() {}

// startRaft starts a single-node raft group for region on db and snaps,
// bootstrapping it if the stores hold nothing yet, and waits until it
// leads. It may run outside the test goroutine.
func startRaft(t *testing.T, db *DB, snaps *Snapshots, region uint32, fsm raft.FSM) (*raft.Raft, error) {
	return startRaftConf(t, db, snaps, region, fsm, func(*raft.Config) {}, func(*raft.Raft) {})
}

// startRaftConf is startRaft with a change to the config, and a hook that
// runs when NewRaft returns (before the election).
func startRaftConf(t *testing.T, db *DB, snaps *Snapshots, region uint32, fsm raft.FSM,
	change func(*raft.Config), started func(*raft.Raft)) (*raft.Raft, error) {
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(fmt.Sprintf("node-r%d", region))
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.SnapshotThreshold = 1 << 40 // snapshots only when the test asks
	conf.SnapshotInterval = time.Hour
	conf.TrailingLogs = 10
	conf.LogOutput = testWriter(t)
	conf.LogLevel = "WARN"
	change(conf)
	_, trans := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("addr-r%d", region)))
	logs, stable, ss := db.Log(region), db.Stable(region), snaps.Region(region)
	has, err := raft.HasExistingState(logs, stable, ss)
	if err != nil {
		return nil, err
	}
	if !has {
		cfg := raft.Configuration{Servers: []raft.Server{{ID: conf.LocalID, Address: trans.LocalAddr()}}}
		if err := raft.BootstrapCluster(conf, logs, stable, ss, trans, cfg); err != nil {
			return nil, fmt.Errorf("region %d: BootstrapCluster: %w", region, err)
		}
	}
	r, err := raft.NewRaft(conf, fsm, logs, stable, ss, trans)
	if err != nil {
		return nil, fmt.Errorf("region %d: NewRaft: %w", region, err)
	}
	started(r)
	// Waiting for an election is not an assertion on time: the deadline
	// only keeps a broken test from hanging.
	deadline := time.Now().Add(30 * time.Second)
	for r.State() != raft.Leader {
		if time.Now().After(deadline) {
			_ = r.Shutdown().Error()
			return nil, fmt.Errorf("region %d: no leader (state %v)", region, r.State())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r, nil
}

// applyN applies n commands (values from..from+n-1) and returns their sum.
func applyN(r *raft.Raft, from, n uint64) (uint64, error) {
	var futures []raft.ApplyFuture
	var sum uint64
	for v := from; v < from+n; v++ {
		futures = append(futures, r.Apply(binary.LittleEndian.AppendUint64(nil, v), 10*time.Second))
		sum += v
	}
	for _, f := range futures {
		if err := f.Error(); err != nil {
			return 0, fmt.Errorf("Apply: %w", err)
		}
	}
	return sum, nil
}

// TestRaftRestart runs real raft groups (one, then two at once in one DB)
// on the stores: apply, snapshot (compacting the log), apply more, shut
// down, reopen the DB and the snapshots, and start new rafts: each FSM must
// come back from its snapshot plus the log after it, with nothing lost.
func TestRaftRestart(t *testing.T) {
	for _, regions := range [][]uint32{{7}, {1, 2}} {
		t.Run(fmt.Sprintf("regions=%v", regions), func(t *testing.T) {
			mem := vfs.NewMem()
			db := mustOpen(t, mem, "db")
			snaps := mustOpenSnapshots(t, mem, SnapshotOptions{ChunkSize: 4096})
			wantCount, wantSum := map[uint32]uint64{}, map[uint32]uint64{}
			var wg sync.WaitGroup
			var mu sync.Mutex
			errc := make(chan error, len(regions))
			for _, region := range regions {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sum, err := firstRun(t, db, snaps, region)
					errc <- err
					mu.Lock()
					wantCount[region], wantSum[region] = 150, sum
					mu.Unlock()
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			db = mustOpen(t, mem, "db")
			snaps = mustOpenSnapshots(t, mem, SnapshotOptions{ChunkSize: 1 << 20})
			for _, region := range regions {
				metas, err := snaps.Region(region).List()
				if err != nil || len(metas) != 1 {
					t.Fatalf("region %d: snapshots %v %v", region, metas, err)
				}
				fsm := &countFSM{}
				r, err := startRaft(t, db, snaps, region, fsm)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, restores := fsm.state(); restores != 1 {
					t.Fatalf("region %d: FSM restored %d times from a snapshot, want 1", region, restores)
				}
				if err := r.Barrier(10 * time.Second).Error(); err != nil {
					t.Fatal(err)
				}
				count, sum, _ := fsm.state()
				if count != wantCount[region] || sum != wantSum[region] {
					t.Fatalf("region %d: FSM after restart: count %d sum %d, want %d %d", region, count, sum, wantCount[region], wantSum[region])
				}
				// And the group goes on.
				more, err := applyN(r, 1000, 5)
				if err != nil {
					t.Fatal(err)
				}
				sum += more
				if c, s, _ := fsm.state(); c != count+5 || s != sum {
					t.Fatalf("region %d: after more applies: count %d sum %d", region, c, s)
				}
				if err := r.Shutdown().Error(); err != nil {
					t.Fatal(err)
				}
				if err := db.Log(region).Check(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// firstRun starts region's group, applies 100 commands, snapshots (which
// compacts the log), applies 50 more and shuts down. It returns the sum of
// the commands.
func firstRun(t *testing.T, db *DB, snaps *Snapshots, region uint32) (uint64, error) {
	r, err := startRaft(t, db, snaps, region, &countFSM{})
	if err != nil {
		return 0, err
	}
	defer r.Shutdown()
	sum, err := applyN(r, 1, 100)
	if err != nil {
		return 0, err
	}
	if err := r.Snapshot().Error(); err != nil {
		return 0, fmt.Errorf("region %d: Snapshot: %w", region, err)
	}
	more, err := applyN(r, 101, 50)
	if err != nil {
		return 0, err
	}
	if err := r.Shutdown().Error(); err != nil {
		return 0, fmt.Errorf("region %d: Shutdown: %w", region, err)
	}
	if first, _ := db.Log(region).FirstIndex(); first <= 1 {
		return 0, fmt.Errorf("region %d: log not compacted by the snapshot (first index %d)", region, first)
	}
	return sum + more, nil
}

// TestRaftRestoreCommittedLogs: with Config.RestoreCommittedLogs, NewRaft
// replays the log after the snapshot up to the commit index this store
// tracked (raft.CommitTrackingLogStore), before any election.
//
// The snapshot matters: in raft v1.8.0 NewRaft's scan for configuration
// entries starts after the replayed index, so a node whose configuration
// is only in the replayed log comes back with no peers ("no known peers,
// aborting election") and never elects itself.
func TestRaftRestoreCommittedLogs(t *testing.T) {
	mem := vfs.NewMem()
	db := mustOpen(t, mem, "db")
	snaps := mustOpenSnapshots(t, mem, SnapshotOptions{})
	restore := func(c *raft.Config) { c.RestoreCommittedLogs = true }
	r, err := startRaftConf(t, db, snaps, 3, &countFSM{}, restore, func(*raft.Raft) {})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := applyN(r, 1, 40)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	// Two more rounds: the second StoreLogs carries the commit index
	// that covers the first.
	for v := uint64(41); v <= 42; v++ {
		more, err := applyN(r, v, 1)
		if err != nil {
			t.Fatal(err)
		}
		sum += more
	}
	if err := r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	commit, _ := db.Log(3).GetCommitIndex()
	last, _ := db.Log(3).LastIndex()
	if commit == 0 || commit >= last {
		t.Fatalf("commit index %d, last index %d", commit, last)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, mem, "db")
	if c, _ := db.Log(3).GetCommitIndex(); c != commit {
		t.Fatalf("commit index after reopen %d, before %d", c, commit)
	}
	fsm := &countFSM{}
	var appliedAtStart uint64
	r, err = startRaftConf(t, db, snaps, 3, fsm, restore, func(r *raft.Raft) { appliedAtStart = r.AppliedIndex() })
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	if appliedAtStart != commit {
		t.Fatalf("NewRaft replayed up to index %d, want the tracked commit index %d", appliedAtStart, commit)
	}
	if err := r.Barrier(10 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if c, s, _ := fsm.state(); c != 42 || s != sum {
		t.Fatalf("count %d sum %d, want 42 %d", c, s, sum)
	}
}
