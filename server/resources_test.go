package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"golang.org/x/sys/unix"

	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// shmTestDir returns a fresh directory in /dev/shm (a tmpfs), removed with
// everything in it at cleanup; the test is skipped without one.
func shmTestDir(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat(DefaultShmDir); err != nil || !fi.IsDir() || unix.Access(DefaultShmDir, unix.W_OK) != nil {
		t.Skipf("no writable %s", DefaultShmDir)
	}
	dir, err := os.MkdirTemp(DefaultShmDir, "cell-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// listDir lists the names in dir.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// deadPid returns the pid of a process that exited.
func deadPid(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	if err := unix.Kill(c.Process.Pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Skipf("pid %d was reused", c.Process.Pid)
	}
	return c.Process.Pid
}

// A new server's region, on shm, takes memory as it is used: its file has
// far fewer blocks than its size. Options.Prefault commits it all.
func TestRegionTakesMemoryAsUsed(t *testing.T) {
	const size = 256 << 20
	for _, prefault := range []bool{false, true} {
		t.Run(fmt.Sprintf("prefault=%v", prefault), func(t *testing.T) {
			shm := shmTestDir(t)
			_, _ = newTestServerWith(t, func(o *Options) {
				o.RegionSize, o.MeganodeSize = size, 16<<20
				o.Hugepages, o.ShmDir, o.Prefault = meganode.HugepagesAuto, shm, prefault
			})
			var region string
			for _, n := range listDir(t, shm) {
				if strings.HasPrefix(n, "cell-") && !strings.HasPrefix(n, "cell-rdma-") {
					region = filepath.Join(shm, n)
				}
			}
			if region == "" {
				t.Skipf("the region is not on shm here: %v", listDir(t, shm))
			}
			var st unix.Stat_t
			if err := unix.Stat(region, &st); err != nil {
				t.Fatal(err)
			}
			blocks := uint64(st.Blocks) * 512
			t.Logf("region file %s: %d KiB of blocks for %d MiB", region, blocks>>10, size>>20)
			if !prefault && blocks > size/16 {
				t.Fatalf("a new server's %d MiB region file has %d KiB of blocks: memory taken up front", size>>20, blocks>>10)
			}
			if prefault && blocks < size {
				t.Fatalf("prefaulted region file has %d KiB of blocks, want %d MiB", blocks>>10, size>>20)
			}
		})
	}
}

// newTestServerWith is newTestServer returning the options used.
func newTestServerWith(t *testing.T, edit func(*Options)) (*Server, Options) {
	t.Helper()
	store := regiontable.NewMemory()
	t.Cleanup(func() { _ = store.Close() })
	opts := testOptions(t, store)
	edit(&opts)
	return startServer(t, opts), opts
}

// A starting server removes what earlier runs of its data directory left
// in the shm directory (kill -9): every region file named after the
// directory (its own region's, a follower's, a restore's) that no process
// holds, and the shm registration tables of dead processes. Files of
// other data directories, held files and live processes' tables stay. A
// clean stop then removes everything the server made there.
func TestStartRemovesLeftovers(t *testing.T) {
	shm := shmTestDir(t)
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	opts.ShmDir = shm
	abs, err := filepath.Abs(opts.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	prefix := regionFilePrefix(abs)
	mk := func(name string) string {
		p := filepath.Join(shm, name)
		if err := os.WriteFile(p, []byte("left over"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dead := deadPid(t)
	stale := []string{
		mk(prefix + "000001"),
		mk(prefix + "0000ff"),
		mk(prefix + "0000ff.restoring"),
		mk(fmt.Sprintf("cell-rdma-%d-0123456789abcdef", dead)),
	}
	kept := []string{
		mk(regionFilePrefix(abs+"-other") + "000001"),
		mk(fmt.Sprintf("cell-rdma-%d-0123456789abcdef", os.Getppid())),
		mk(prefix + "0000fe"),
	}
	held, err := os.Open(kept[2])
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	s := startUnclosed(t, opts)
	for _, p := range stale {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("left over %s is still there (%v)", filepath.Base(p), err)
		}
	}
	for _, p := range kept {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", filepath.Base(p), err)
		}
	}
	made := listDir(t, shm)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	after := listDir(t, shm)
	if len(after) != len(kept) {
		t.Fatalf("shm directory after a clean stop: %v (while running: %v); want only the %d files the test kept", after, made, len(kept))
	}
}

// Wipe removes a data directory and its region files, also once the
// directory itself is gone; it refuses while a server runs on it, and
// refuses a directory that is not a data directory.
func TestWipe(t *testing.T) {
	shm := shmTestDir(t)
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	opts.DataDir = filepath.Join(t.TempDir(), "d1")
	opts.ShmDir, opts.Hugepages = shm, meganode.HugepagesAuto
	s := startUnclosed(t, opts)
	if removed, err := Wipe(opts.DataDir, shm); !errors.Is(err, ErrDataDirLocked) || len(removed) != 0 {
		t.Fatalf("Wipe of a running server's directory = %v, %v", removed, err)
	}
	if _, err := os.Stat(filepath.Join(opts.DataDir, walDir)); err != nil {
		t.Fatalf("refused Wipe removed the log: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What a kill -9 leaves: the region files in the shm directory.
	abs, _ := filepath.Abs(opts.DataDir)
	leftover := func() []string {
		var ps []string
		for _, id := range []string{"000001", "000002"} {
			p := filepath.Join(shm, regionFilePrefix(abs)+id)
			if err := os.WriteFile(p, []byte("left over"), 0o600); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		return ps
	}
	files := leftover()
	removed, err := Wipe(opts.DataDir, shm)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed %v", removed)
	for _, p := range append(files, opts.DataDir) {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after Wipe (%v)", p, err)
		}
	}
	// rm -rf of the data directory first: Wipe still finds its files.
	files = leftover()
	if _, err := Wipe(opts.DataDir, shm); err != nil {
		t.Fatal(err)
	}
	for _, p := range files {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after Wipe of a deleted directory (%v)", p, err)
		}
	}
	if len(listDir(t, shm)) != 0 {
		t.Errorf("shm directory after Wipe: %v", listDir(t, shm))
	}
	// A region file some process holds is left, and said so.
	files = leftover()
	held, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := Wipe(opts.DataDir, shm); !errors.Is(err, ErrDataDirLocked) || !strings.Contains(err.Error(), filepath.Base(files[0])) {
		t.Errorf("Wipe with a held region file = %v", err)
	}
	if _, err := os.Stat(files[0]); err != nil {
		t.Errorf("held region file: %v", err)
	}
	if _, err := os.Stat(files[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there after Wipe (%v)", files[1], err)
	}
	// Not a data directory: refused, nothing removed.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "precious"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Wipe(other, shm); err == nil {
		t.Fatal("Wipe of a directory that is no data directory succeeded")
	}
	if _, err := os.Stat(filepath.Join(other, "precious")); err != nil {
		t.Fatal(err)
	}
}

// getProbe GETs http://addr/path and returns the status and body.
func getProbe(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// /healthz and /readyz on the metrics listener: while the server starts
// (replaying its log) it is healthy and not ready; once it serves, both
// answer 200 "ok"; after its log's sync failed (latched) neither does.
func TestHealthAndReadiness(t *testing.T) {
	var armed atomic.Bool
	fault := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) && strings.HasSuffix(op.Path, ".log") {
			return errorfs.ErrInjected
		}
		return nil
	})
	store := regiontable.NewMemory()
	defer store.Close()
	opts := testOptions(t, store)
	opts.MetricsListen = "127.0.0.1:0"
	opts.TestingKnobs.WALFS = errorfs.Wrap(vfs.Default, fault)
	addrc, release := make(chan string, 1), make(chan struct{})
	var s *Server
	opts.TestingKnobs.BeforeGroups = func() {
		addrc <- s.MetricsAddr()
		<-release
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- s.Start(ctxT(t)) }()
	addr := <-addrc
	if code, body := getProbe(t, addr, "/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz while starting: %d %q", code, body)
	}
	if code, body := getProbe(t, addr, "/readyz"); code != http.StatusServiceUnavailable || body != "starting" {
		t.Errorf("/readyz while starting: %d %q", code, body)
	}
	close(release)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := getProbe(t, addr, p); code != http.StatusOK || body != "ok" {
			t.Errorf("%s of a serving server: %d %q", p, code, body)
		}
	}
	c := dial(t, s)
	put(t, c, "k", "v")
	armed.Store(true)
	if _, err := call(t, c, wire.OpPut, &wire.PutRequest{Key: []byte("k2"), Value: []byte("v")}, nil); err == nil {
		t.Fatal("a write was acknowledged after the log's sync failed")
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		code, body := getProbe(t, addr, p)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "failed") {
			t.Errorf("%s after the log failed: %d %q", p, code, body)
		}
	}
}
