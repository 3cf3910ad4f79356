package rdma

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A shm server removes, when it starts, the registration tables of
// processes that died without closing theirs (kill -9): files named
// cell-rdma-<pid>-* whose pid is gone and that no process holds locked.
// A live process's table, and a table some process holds locked (a pid
// seen from another pid namespace), stay. Close removes the server's own
// table.
func TestSHMRemovesStaleTables(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	deadPid := dead.Process.Pid
	if err := unix.Kill(deadPid, 0); err == nil {
		t.Skipf("pid %d was reused at once", deadPid)
	}
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := mk(fmt.Sprintf("cell-rdma-%d-0123456789abcdef", deadPid))
	live := mk(fmt.Sprintf("cell-rdma-%d-0123456789abcdef", os.Getppid()))
	locked := mk(fmt.Sprintf("cell-rdma-%d-fedcba9876543210", deadPid))
	other := mk("cell-rdma-notapid-0123")
	f, err := os.Open(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	srv, err := NewSHMServer(SHMOptions{Dir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if exists(stale) {
		t.Errorf("the table of dead pid %d is still there", deadPid)
	}
	for _, p := range []string{live, locked, other, srv.TablePath()} {
		if !exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
	// The server's own table is locked while it runs: another server
	// starting beside it (another pid namespace would see its pid as
	// dead) leaves it alone.
	srv2, err := NewSHMServer(SHMOptions{Dir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !exists(srv.TablePath()) {
		t.Error("a second server removed the first one's table")
	}
	for _, s := range []*SHMServer{srv, srv2} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if exists(s.TablePath()) {
			t.Errorf("Close left %s", s.TablePath())
		}
	}
}
