package rdma

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cellstore/cell/internal/atomicmem"
)

// newSHM returns a shm server and client (closed at cleanup) and a
// registered pattern-filled file region.
func newSHM(t *testing.T, opts SHMOptions, copts SHMClientOptions) (*SHMServer, *SHMClient, RemoteKey, uint64) {
	t.Helper()
	region := newFileRegion(t, 4)
	seed := uint64(len(t.Name())) * 0x9e3779b97f4a7c15
	fillPattern(region.Bytes(), seed)
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	opts.Logger = testLogger(t)
	srv, err := NewSHMServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := NewSHMClient(copts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Close()
		_ = srv.Close()
	})
	return srv, cl, mustRegister(t, srv, region), seed
}

// TestSHMNotSameHost: a key from another host is refused before any file
// is opened.
func TestSHMNotSameHost(t *testing.T) {
	_, _, rk, _ := newSHM(t, SHMOptions{Host: "server-host"}, SHMClientOptions{})
	cl, err := NewSHMClient(SHMClientOptions{Host: "client-host"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Read(context.Background(), &rk, 0, make([]byte, 8)); !errors.Is(err, ErrNotSameHost) {
		t.Fatalf("got %v, want ErrNotSameHost", err)
	}
	if len(*cl.maps.Load()) != 0 {
		t.Fatal("a refused read mapped files")
	}
}

// TestSHMNotShareable: a region without a file cannot be registered.
func TestSHMNotShareable(t *testing.T) {
	srv, _, _, _ := newSHM(t, SHMOptions{}, SHMClientOptions{})
	if _, err := srv.Register(&memRegion{id: 1, mem: atomicmem.Alloc(4096)}); !errors.Is(err, ErrNotShareable) {
		t.Fatalf("got %v, want ErrNotShareable", err)
	}
}

// TestSHMReplacedFile: a client never reads a file other than the one
// registered, even at the registered path.
func TestSHMReplacedFile(t *testing.T) {
	_, cl, rk, _ := newSHM(t, SHMOptions{}, SHMClientOptions{})
	forged := rk
	forged.Ino++
	if err := cl.Read(context.Background(), &forged, 0, make([]byte, 8)); !errors.Is(err, ErrBadKey) {
		t.Fatalf("read of a file with another inode: got %v, want ErrBadKey", err)
	}
	if err := cl.Read(context.Background(), &rk, 0, make([]byte, 8)); err != nil {
		t.Fatalf("read of the registered file: %v", err)
	}
	forged = rk
	forged.Slot = 1 << 30
	if err := cl.Read(context.Background(), &forged, 0, make([]byte, 8)); !errors.Is(err, ErrBadKey) {
		t.Fatalf("slot beyond the table: got %v, want ErrBadKey", err)
	}
	forged = rk
	forged.Table = rk.Path // not a table
	if err := cl.Read(context.Background(), &forged, 0, make([]byte, 8)); !errors.Is(err, ErrBadKey) {
		t.Fatalf("a region file as table: got %v, want ErrBadKey", err)
	}
}

// TestSHMTableSlots: slots are used fresh first, then the oldest revoked
// one; a full table refuses registrations; a reused slot fails older keys
// with ErrBadKey.
func TestSHMTableSlots(t *testing.T) {
	srv, cl, rk0, _ := newSHM(t, SHMOptions{Slots: 2}, SHMClientOptions{})
	region := newFileRegion(t, 8)
	rk1 := mustRegister(t, srv, region)
	if rk0.Slot != 0 || rk1.Slot != 1 {
		t.Fatalf("slots %d, %d: want 0, 1", rk0.Slot, rk1.Slot)
	}
	if _, err := srv.Register(region); !errors.Is(err, ErrTooManyRegistrations) {
		t.Fatalf("third registration in 2 slots: got %v, want ErrTooManyRegistrations", err)
	}
	for _, k := range []Key{rk1.Key, rk0.Key} {
		if err := srv.Deregister(k); err != nil {
			t.Fatal(err)
		}
	}
	rk2 := mustRegister(t, srv, region)
	if rk2.Slot != rk1.Slot {
		t.Fatalf("reused slot %d, want the oldest revoked (%d)", rk2.Slot, rk1.Slot)
	}
	ctx := context.Background()
	if err := cl.Read(ctx, &rk1, 0, make([]byte, 8)); !errors.Is(err, ErrBadKey) {
		t.Fatalf("key whose slot was reused: got %v, want ErrBadKey", err)
	}
	if err := cl.Read(ctx, &rk0, 0, make([]byte, 8)); !errors.Is(err, ErrRevoked) {
		t.Fatalf("key with its tombstone: got %v, want ErrRevoked", err)
	}
	if err := cl.Read(ctx, &rk2, 0, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
}

// TestSHMCloseRevokesAndRemovesTable: after the server closes, a client
// that has the table mapped sees tombstones, a new client finds no table,
// and the table file is gone.
func TestSHMCloseRevokesAndRemovesTable(t *testing.T) {
	srv, cl, rk, _ := newSHM(t, SHMOptions{}, SHMClientOptions{})
	ctx := context.Background()
	if err := cl.Read(ctx, &rk, 0, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(rk.Table); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("table file after Close: %v", err)
	}
	if err := cl.Read(ctx, &rk, 0, make([]byte, 8)); !errors.Is(err, ErrRevoked) {
		t.Fatalf("mapped client: got %v, want ErrRevoked", err)
	}
	cl2, err := NewSHMClient(SHMClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	if err := cl2.Read(ctx, &rk, 0, make([]byte, 8)); !errors.Is(err, ErrBadKey) {
		t.Fatalf("new client: got %v, want ErrBadKey", err)
	}
}

// TestSHMReadAllocs: the read path allocates nothing (doc.go, "The shm
// provider"): a shm read allocates nothing once the files are mapped.
func TestSHMReadAllocs(t *testing.T) {
	_, cl, rk, _ := newSHM(t, SHMOptions{}, SHMClientOptions{})
	ctx := context.Background()
	dst := atomicmem.Alloc(1024)
	segs := []Segment{{Off: 0, Dst: dst[:512]}, {Off: 4096, Dst: dst[512:]}}
	var op Op
	cq := NewCQ(1)
	op.Prepare(&rk, 64, dst)
	if err := cl.Read(ctx, &rk, 0, dst); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"Read":  func() error { return cl.Read(ctx, &rk, 0, dst) },
		"ReadV": func() error { return cl.ReadV(ctx, &rk, segs) },
		"Post": func() error {
			if err := cl.Post(ctx, &op, cq); err != nil {
				return err
			}
			return cq.Poll().Err()
		},
	} {
		var err error
		if allocs := testing.AllocsPerRun(200, func() { err = f() }); allocs != 0 || err != nil {
			t.Errorf("%s: %v allocations per read (err %v), want 0", name, allocs, err)
		}
	}
}

// TestSHMCrossProcess: another process (this test binary re-executed)
// reads the region through its own mappings; the server's Deregister
// revokes its access at once, with no message sent to it.
func TestSHMCrossProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	srv, _, rk, seed := newSHM(t, SHMOptions{}, SHMClientOptions{})
	desc, err := json.Marshal(rk)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSHMHelperProcess$")
	cmd.Env = append(os.Environ(), "RDMA_SHM_HELPER="+string(desc))
	stdin, _ := cmd.StdinPipe()
	stdoutPipe, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	stdout := bufio.NewReader(stdoutPipe)
	ask := func(off, n uint64) string {
		t.Helper()
		if _, err := fmt.Fprintf(stdin, "%d %d\n", off, n); err != nil {
			t.Fatal(err)
		}
		for {
			line, err := stdout.ReadString('\n')
			if err != nil {
				t.Fatalf("helper: %v", err)
			}
			if s, ok := strings.CutPrefix(line, "helper: "); ok {
				return strings.TrimSpace(s)
			}
		}
	}
	table := crc64.MakeTable(crc64.ECMA)
	for _, r := range [][2]uint64{{0, 1024}, {rk.Len - 4096, 4096}, {1 << 20, 64 << 10}} {
		want := fmt.Sprintf("ok %x", crc64.Checksum(wantPattern(seed, r[0], int(r[1])), table))
		if got := ask(r[0], r[1]); got != want {
			t.Fatalf("helper read %d bytes at %d: %q, want %q", r[1], r[0], got, want)
		}
	}
	if err := srv.Deregister(rk.Key); err != nil {
		t.Fatal(err)
	}
	if got := ask(0, 1024); got != "err revoked" {
		t.Fatalf("helper read after Deregister: %q, want revoked", got)
	}
}

// TestSHMHelperProcess is the other process of TestSHMCrossProcess: it
// answers "offset length" lines with the CRC of what it read.
func TestSHMHelperProcess(t *testing.T) {
	desc := os.Getenv("RDMA_SHM_HELPER")
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
	table := crc64.MakeTable(crc64.ECMA)
	in := bufio.NewReader(os.Stdin)
	for {
		var off, n uint64
		if _, err := fmt.Fscanf(in, "%d %d\n", &off, &n); err != nil {
			if err != io.EOF {
				fmt.Printf("helper: err %v\n", err)
			}
			return
		}
		dst := make([]byte, n)
		switch err := cl.Read(context.Background(), &rk, off, dst); {
		case err == nil:
			fmt.Printf("helper: ok %x\n", crc64.Checksum(dst, table))
		case errors.Is(err, ErrRevoked):
			fmt.Printf("helper: err revoked\n")
		default:
			fmt.Printf("helper: err %v\n", err)
		}
	}
}

// TestHostID: the identity is stable and names the host.
func TestHostID(t *testing.T) {
	a, err := HostID()
	if err != nil {
		t.Skipf("no host identity here: %v", err)
	}
	b, _ := HostID()
	name, _ := os.Hostname()
	if a != b || !strings.HasPrefix(a, name+"/") || len(a) <= len(name)+1 {
		t.Fatalf("HostID %q, %q (host name %q)", a, b, name)
	}
}
