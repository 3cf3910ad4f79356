package rdma

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cellstore/cell/meganode"
)

// testShareGID is the group TestSHMFileGroup shares its files with: any
// ID will do for root, which may give files to groups it is not in.
const testShareGID = 4242

// testOtherUID is the user the test's other processes run as (nobody).
const testOtherUID = 65534

// TestSHMFileGroup: with FileGroup, the region file and the registration
// table are 0640 and owned by the group, so that another user in the
// group reads one-sided over shared memory; another user outside it
// cannot open them (issue #12: "shm region files are mode 0600 (or
// group-restricted to a configured group) so other local users cannot map
// them"). Without it they are 0600. It runs the other users' processes
// with setuid, so only as root.
func TestSHMFileGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run processes as other users")
	}
	// Directories the other users can traverse.
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("other users cannot reach %s (%v)", d, err)
		}
		if d == "/" {
			break
		}
	}
	create := func(name string, group int) *meganode.Region {
		r, err := meganode.Create(meganode.Options{ID: 5, Size: testRegionSize, MeganodeSize: testMeganodeSize,
			Dir: dir, Name: name, Hugepages: meganode.HugepagesOff, FileGroup: group, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close(); _ = r.Remove() })
		return r
	}
	shared, private := create("shared", testShareGID), create("private", 0)
	seed := uint64(0x5eed)
	fillPattern(shared.Bytes(), seed)
	srv, err := NewSHMServer(SHMOptions{Dir: dir, FileGroup: testShareGID, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	rk := mustRegister(t, srv, shared)

	for _, f := range []struct {
		path string
		mode fs.FileMode
		gid  int
	}{{rk.Path, 0o640, testShareGID}, {rk.Table, 0o640, testShareGID}, {private.Path(), 0o600, 0}} {
		fi, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != f.mode || int(st.Gid) != f.gid {
			t.Errorf("%s: mode %v group %d, want %v group %d", f.path, fi.Mode().Perm(), st.Gid, f.mode, f.gid)
		}
	}
	if _, err := NewSHMServer(SHMOptions{Dir: dir, FileGroup: -1}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("FileGroup -1: %v, want ErrInvalidOptions", err)
	}

	// The test binary, where the other users can run it.
	bin := filepath.Join(dir, "rdma.test")
	copyFile(t, os.Args[0], bin)
	desc, err := json.Marshal(rk)
	if err != nil {
		t.Fatal(err)
	}
	run := func(groups []uint32) string {
		cmd := exec.Command(bin, "-test.run=^TestSHMFileGroupHelper$", "-test.v")
		cmd.Env = append(os.Environ(), "RDMA_SHM_GROUP_HELPER="+string(desc))
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testOtherUID, Gid: testOtherUID, Groups: groups}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper as uid %d groups %v: %v\n%s", testOtherUID, groups, err, out)
		}
		for line := range strings.SplitSeq(string(out), "\n") {
			if r, ok := strings.CutPrefix(line, "RESULT "); ok {
				return r
			}
		}
		t.Fatalf("helper printed no result:\n%s", out)
		return ""
	}
	want := fmt.Sprintf("read %#x", patternWord(seed, 4096))
	if got := run([]uint32{testShareGID}); got != want {
		t.Errorf("a user in the group: %q, want %q", got, want)
	}
	if got := run(nil); got != "permission denied" {
		t.Errorf("a user outside the group: %q, want permission denied", got)
	}
}

// TestSHMFileGroupHelper is the other user's process of TestSHMFileGroup:
// it reads the word at offset 4096 of the RemoteKey in its environment.
func TestSHMFileGroupHelper(t *testing.T) {
	desc := os.Getenv("RDMA_SHM_GROUP_HELPER")
	if desc == "" {
		t.Skip("helper process only")
	}
	var rk RemoteKey
	if err := json.Unmarshal([]byte(desc), &rk); err != nil {
		t.Fatal(err)
	}
	cl, err := NewSHMClient(SHMClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	buf := make([]byte, 8)
	err = cl.Read(context.Background(), &rk, 4096, buf)
	switch {
	case err == nil:
		fmt.Printf("RESULT read %#x\n", le.Uint64(buf))
	case errors.Is(err, fs.ErrPermission):
		fmt.Println("RESULT permission denied")
	default:
		fmt.Printf("RESULT error %v\n", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
