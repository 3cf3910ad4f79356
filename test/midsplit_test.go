package test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/server"
)

// TestKillMidSplit is the drill of a SIGKILL in the middle of a meganode
// split, at each of its steps, of the split's source (the leader of the
// region being split) and of a remote split's target (the leader of the
// region receiving the new meganode). Three servers, every region
// replicated three ways; writers grow the tree until the first split
// reaches the step, where the server doing it kills itself (the
// CELL_TESTING_FAILPOINTS knob: exactly a kill -9 at that step, once per
// cluster). docs/design.md §9: "An acknowledged write is never lost while a
// majority of its region's replicas survive", and the paper (§2.2) has
// the split "resumed or undone" from the replicated log by whoever leads
// the region next. So: the writes go on while the victim is down; after
// its restart every key range takes writes again, no split is left in
// progress (a target whose source gave it up is dropped), every
// acknowledged key is read back with its value, a scan returns each
// exactly once and in order, and `cellctl check` finds the tree whole and
// every region's replicas byte-identical.
func TestKillMidSplit(t *testing.T) {
	cases := []struct {
		placement string
		point     string
	}{
		{"remote", server.FailpointSplitFroze},
		{"remote", server.FailpointSplitCopied},
		{"remote", server.FailpointSplitLinked},
		{"remote", server.FailpointSplitInvalidated},
		{"remote", server.FailpointSplitParent},
		{"remote", server.FailpointTargetBegan},
		{"remote", server.FailpointTargetAppended},
		{"remote", server.FailpointTargetEnded},
		{"local", server.FailpointSplitCopied},
		{"local", server.FailpointSplitLinked},
	}
	for _, c := range cases {
		name := c.placement + "/" + strings.TrimPrefix(c.point, "server/split/")
		t.Run(name, func(t *testing.T) { killMidSplit(t, c.placement, c.point) })
	}
}

func killMidSplit(t *testing.T, placement, point string) {
	once := filepath.Join(t.TempDir(), "killed")
	cl := startCluster(t, 3, serverOptions{cores: 1, regionSize: "32MiB", meganodeSize: "128KiB",
		env: []string{"CELL_TESTING_FAILPOINTS=" + point + "=kill(" + once + ")"},
		flags: []string{"--replicas", "3", "--raft-heartbeat-timeout", "300ms", "--split-placement", placement,
			"--orphan-target-age", "2s"}})
	store, err := regiontable.OpenEtcd([]string{cl.etcd.endpoint()}, regiontable.EtcdOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	waitReplicated(t, store, 3)

	set := &ackedSet{attempted: map[string]bool{}}
	var next, acks, failed atomic.Int64
	c := cl.newClient(t, nil)
	put := func(ctx context.Context, k string) error {
		set.attempt(k)
		octx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := c.Put(octx, []byte(k), []byte(growValue(k))); err != nil {
			return err
		}
		set.ack(k)
		acks.Add(1)
		return nil
	}
	stop := make(chan struct{})
	var writers sync.WaitGroup
	var lastErr atomic.Value
	for range 4 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := put(context.Background(), growKey(int(next.Add(1)))); err != nil {
					failed.Add(1) // the outcome is unknown: attempted, not acknowledged
					lastErr.Store(err)
				}
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		writers.Wait()
	}()

	// The first split to reach the point kills its server.
	victim := waitForSelfKill(t, cl, once, 90*time.Second)
	atKill := acks.Load()
	t.Logf("%s killed itself at %s after %d acknowledged writes", victim.id, point, atKill)

	// The others go on without it.
	waitFor(t, func() bool { return acks.Load() >= atKill+200 }, "200 writes acknowledged after the kill", 30*time.Second)
	victim.restart(t)
	time.Sleep(time.Second)
	close(stop)
	writers.Wait()

	// Every key range takes writes again: fresh keys spread over the tree.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 400 {
		k := growKey(int(next.Add(1)))
		if err := put(ctx, k); err != nil {
			t.Fatalf("write %d after the restart, %q: %v", i, k, err)
		}
	}
	waitNoSplitInProgress(t, cl, 45*time.Second)

	keys := set.snapshot()
	for _, k := range keys {
		v, err := c.Get(ctx, []byte(k))
		if err != nil || string(v) != growValue(k) {
			t.Fatalf("acknowledged key %q: %q, %v", k, v, err)
		}
	}
	got, err := scanKeys(ctx, c, []byte("grow/"), client.PrefixEnd([]byte("grow/")), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkScanned(got, keys, set); err != nil {
		t.Fatal(err)
	}
	// A check sees splits of other servers in progress as gaps: it is
	// asked again for a while.
	var code int
	var out, errOut string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		code, out, errOut = cl.servers[0].cellctl(t, "check")
		if code == 0 && strings.Contains(out, "regions equal") || time.Now().After(deadline) {
			break
		}
	}
	le, _ := lastErr.Load().(error)
	t.Logf("%d writes acknowledged (%d after the kill), %d failed or unknown (last: %v); %d keys scanned; %s",
		acks.Load(), acks.Load()-atKill, failed.Load(), le, len(got), strings.TrimSpace(lastLine(out)))
	if code != 0 || !strings.Contains(out, "regions equal") {
		t.Fatalf("cellctl check: exit %d\n%s%s", code, out, errOut)
	}
}

// waitForSelfKill waits until a server of cl killed itself at a failpoint
// (once exists and the process ended by SIGKILL), and returns it.
func waitForSelfKill(t *testing.T, cl *testCluster, once string, timeout time.Duration) *cellServer {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, s := range cl.servers {
			if s.alive() {
				continue
			}
			var ee *exec.ExitError
			if !errors.As(s.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("%s exited, not by SIGKILL: %v\n%s", s.id, s.err, s.out.String())
			}
			if _, err := os.Stat(once); err != nil {
				t.Fatalf("%s was killed, but not at the failpoint: %v", s.id, err)
			}
			s.reap()
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no server reached the failpoint within %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitNoSplitInProgress waits until no server reports a meganode as the
// source or the target of a split in progress.
func waitNoSplitInProgress(t *testing.T, cl *testCluster, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		var busy []string
		for _, s := range cl.servers {
			for _, mn := range metadata(t, s).Meganodes {
				if mn.SplitSource || mn.SplitTarget {
					busy = append(busy, fmt.Sprintf("%s: %v source %v target %v", s.id, mn.Ptr, mn.SplitSource, mn.SplitTarget))
				}
			}
		}
		if len(busy) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("splits still in progress %v after the writes: %v", timeout, busy)
		}
	}
}

// checkScanned checks a scan's keys: in order, each once, every
// acknowledged key among them, none never attempted.
func checkScanned(got, acked []string, set *ackedSet) error {
	seen := make(map[string]bool, len(got))
	for i, k := range got {
		if i > 0 && got[i-1] >= k {
			return fmt.Errorf("scan out of order or repeated at %d: %q then %q", i, got[i-1], k)
		}
		if !set.wasAttempted(k) {
			return fmt.Errorf("scan returned %q, never written", k)
		}
		seen[k] = true
	}
	for _, k := range acked {
		if !seen[k] {
			return fmt.Errorf("scan lacks acknowledged key %q", k)
		}
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
