//go:build libfabric && cgo

package rdma

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/internal/monotime"
)

// Tests of the fabric provider beyond the conformance suite, over shm and
// tcp;ofi_rxm.

var fabricTestProviders = []string{"shm", "tcp"}

func newFabric(t *testing.T, prov string, so FabricOptions, co FabricClientOptions) (*FabricServer, *FabricClient) {
	t.Helper()
	so.Provider, co.Provider = prov, prov
	so.Node, co.Node = fabricNode(prov), fabricNode(prov)
	so.Logger, co.Logger = testLogger(t), testLogger(t)
	srv, err := NewFabricServer(so)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := NewFabricClient(co)
	if err != nil {
		_ = srv.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Close()
		_ = srv.Close()
	})
	return srv, cl
}

// TestFabricReadAllocs: a read allocates nothing on the client once its
// registration and server are known.
func TestFabricReadAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	for _, prov := range fabricTestProviders {
		t.Run(prov, func(t *testing.T) {
			srv, cl := newFabric(t, prov, FabricOptions{}, FabricClientOptions{})
			region := newFileRegion(t, 3)
			rk := mustRegister(t, srv, region)
			ctx := context.Background()
			dst := atomicmem.Alloc(1024)
			segs := []Segment{{Off: 0, Dst: dst[:512]}, {Off: 4096, Dst: dst[512:]}}
			cq := NewCQ(1)
			var op Op
			op.Prepare(&rk, 64, dst)
			for range 50 {
				if err := cl.Read(ctx, &rk, 0, dst); err != nil {
					t.Fatal(err)
				}
			}
			for name, f := range map[string]func() error{
				"Read":  func() error { return cl.Read(ctx, &rk, 0, dst) },
				"ReadV": func() error { return cl.ReadV(ctx, &rk, segs) },
				"Post": func() error {
					if err := cl.Post(ctx, &op, cq); err != nil {
						return err
					}
					got, err := cq.Wait(ctx)
					if err != nil {
						return err
					}
					return got.Err()
				},
			} {
				var err error
				// The reaper's goroutine is counted too; allow it a little.
				if allocs := testing.AllocsPerRun(300, func() { err = f() }); allocs > 0.2 || err != nil {
					t.Errorf("%s: %v allocations per read (err %v), want 0", name, allocs, err)
				}
			}
		})
	}
}

// TestFabricLeaseUsesServerClock: a client judges a lease by the server's
// clock, learnt from clock messages, not by its own: a server whose clock
// runs an hour ahead, or behind, fences its reads at its own deadline.
func TestFabricLeaseUsesServerClock(t *testing.T) {
	for _, prov := range fabricTestProviders {
		for _, offset := range []time.Duration{time.Hour, -time.Hour} {
			t.Run(fmt.Sprintf("%s/offset=%v", prov, offset), func(t *testing.T) {
				srv, cl := newFabric(t, prov, FabricOptions{TestingKnobs: FabricServerKnobs{ClockOffset: offset}}, FabricClientOptions{})
				region := newFileRegion(t, 3)
				seed := uint64(11)
				fillPattern(region.Bytes(), seed)
				rk := mustRegister(t, srv, region)
				serverNow := func() int64 { return monotime.Now() + int64(offset) }
				read := func() error {
					dst := atomicmem.Alloc(64)
					err := cl.Read(context.Background(), &rk, 4096, dst)
					if err == nil {
						checkPattern(t, seed, 4096, dst)
					}
					return err
				}
				if err := srv.SetLease(rk.Key, serverNow()+int64(time.Hour)); err != nil {
					t.Fatal(err)
				}
				if err := read(); err != nil {
					t.Fatalf("read under the lease: %v", err)
				}
				if err := srv.SetLease(rk.Key, serverNow()+int64(50*time.Millisecond)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(80 * time.Millisecond)
				if err := read(); !errors.Is(err, ErrRevoked) {
					t.Fatalf("read after the server's deadline: %v, want ErrRevoked", err)
				}
				if err := srv.SetLease(rk.Key, serverNow()+int64(time.Hour)); err != nil {
					t.Fatal(err)
				}
				if err := read(); err != nil {
					t.Fatalf("read after renewal: %v", err)
				}
			})
		}
	}
}

// TestFabricReRegistrationRotates: a region registered again gets a new
// key and a new memory registration (another descriptor), so that a
// client holding the old RemoteKey is refused.
func TestFabricReRegistrationRotates(t *testing.T) {
	for _, prov := range fabricTestProviders {
		t.Run(prov, func(t *testing.T) {
			srv, cl := newFabric(t, prov, FabricOptions{}, FabricClientOptions{})
			region := newFileRegion(t, 3)
			rk := mustRegister(t, srv, region)
			if err := cl.Read(context.Background(), &rk, 0, make([]byte, 8)); err != nil {
				t.Fatal(err)
			}
			if err := srv.Deregister(rk.Key); err != nil {
				t.Fatal(err)
			}
			rk2 := mustRegister(t, srv, region)
			d1, _ := parseFabricDesc(rk.Desc)
			d2, _ := parseFabricDesc(rk2.Desc)
			if rk2.Key == rk.Key || rk2.Desc == rk.Desc || (!srv.end.provKey() && d1.key == d2.key) {
				t.Fatalf("re-registration kept key %v / descriptor %q", rk.Key, rk.Desc)
			}
			if d1.addr != d2.addr || d1.incarnation != d2.incarnation {
				t.Fatalf("the endpoint changed: %+v, %+v", d1, d2)
			}
			if err := cl.Read(context.Background(), &rk2, 0, make([]byte, 8)); err != nil {
				t.Fatalf("read of the new registration: %v", err)
			}
			if err := cl.Read(context.Background(), &rk, 0, make([]byte, 8)); !errors.Is(err, ErrRevoked) {
				t.Fatalf("read of the old registration: %v, want ErrRevoked", err)
			}
		})
	}
}

// TestFabricFirstReadDeadline: the first read of a new server (address
// vector entry, lazy connection, the registration's slot) ends within its
// context: done, or failed with the context's error; a later read works.
func TestFabricFirstReadDeadline(t *testing.T) {
	for _, prov := range fabricTestProviders {
		t.Run(prov, func(t *testing.T) {
			srv, cl := newFabric(t, prov, FabricOptions{}, FabricClientOptions{})
			region := newFileRegion(t, 3)
			rk := mustRegister(t, srv, region)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
			err := cl.Read(ctx, &rk, 0, make([]byte, 1024))
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("first read: %v, want success or DeadlineExceeded", err)
			}
			t.Logf("first read with a 200µs deadline: %v", err)
			ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := cl.Read(ctx, &rk, 0, make([]byte, 1024)); err != nil {
				t.Fatalf("second read: %v", err)
			}
		})
	}
}

// TestFabricCloseStopsEverything: closing both sides ends their
// goroutines; a closed client refuses reads.
func TestFabricCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, prov := range fabricTestProviders {
		srv, err := NewFabricServer(FabricOptions{Provider: prov, Node: fabricNode(prov), Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := NewFabricClient(FabricClientOptions{Provider: prov, Node: fabricNode(prov), Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		region := newFileRegion(t, 3)
		rk := mustRegister(t, srv, region)
		if err := cl.Read(context.Background(), &rk, 0, make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
		if err := cl.Read(context.Background(), &rk, 0, make([]byte, 64)); err == nil || !isTypedFailure(err) {
			t.Fatalf("read after the server closed: %v", err)
		}
		if err := cl.Close(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the providers' goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestFabricCrossProcess: a server in another process (this test binary
// re-executed) serves reads; its Deregister revokes at once; killed with
// SIGKILL, its reads fail with a typed error within the client's
// ReadTimeout instead of hanging.
func TestFabricCrossProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	for _, prov := range fabricTestProviders {
		t.Run(prov, func(t *testing.T) {
			// The killed helper leaves its libfabric shm file: removed
			// last, once the helper is reaped.
			t.Cleanup(func() {
				if _, err := RemoveStaleFabricSHM(""); err != nil {
					t.Error(err)
				}
			})
			cmd := exec.Command(os.Args[0], "-test.run=^TestFabricHelperProcess$")
			cmd.Env = append(os.Environ(), "RDMA_FABRIC_HELPER="+prov)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})
			out := bufio.NewScanner(stdout)
			var rk RemoteKey
			var seed uint64
			for out.Scan() {
				if line, ok := strings.CutPrefix(out.Text(), "helper: key "); ok {
					head, keyJSON, _ := strings.Cut(line, " ")
					if _, err := fmt.Sscanf(head, "%d", &seed); err != nil {
						t.Fatal(err)
					}
					if err := json.Unmarshal([]byte(keyJSON), &rk); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
			if rk.Key == 0 {
				t.Fatalf("no key from the helper: %v", out.Err())
			}
			cl, err := NewFabricClient(FabricClientOptions{Provider: prov, Node: fabricNode(prov), ReadTimeout: 2 * time.Second, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx := context.Background()
			for i := range 100 {
				dst := atomicmem.Alloc(1024)
				off := uint64(i) * 8192
				if err := cl.Read(ctx, &rk, off, dst); err != nil {
					t.Fatalf("read %d: %v", i, err)
				}
				checkPattern(t, seed, off, dst)
			}
			fmt.Fprintln(stdin, "deregister")
			if !out.Scan() || out.Text() != "helper: deregistered" {
				t.Fatalf("helper: %q %v", out.Text(), out.Err())
			}
			if err := cl.Read(ctx, &rk, 0, make([]byte, 64)); !errors.Is(err, ErrRevoked) {
				t.Fatalf("read after Deregister in the other process: %v, want ErrRevoked", err)
			}
			fmt.Fprintln(stdin, "register")
			if !out.Scan() {
				t.Fatal(out.Err())
			}
			line, _ := strings.CutPrefix(out.Text(), "helper: key ")
			_, keyJSON, _ := strings.Cut(line, " ")
			if err := json.Unmarshal([]byte(keyJSON), &rk); err != nil {
				t.Fatalf("%q: %v", out.Text(), err)
			}
			if err := cl.Read(ctx, &rk, 0, make([]byte, 64)); err != nil {
				t.Fatalf("read of the new registration: %v", err)
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			start := time.Now()
			for range 3 {
				err := cl.Read(ctx, &rk, 0, make([]byte, 64))
				if err == nil || !isTypedFailure(err) {
					t.Fatalf("read of a killed server: %v", err)
				}
				t.Logf("read of a killed server after %v: %v", time.Since(start).Round(time.Millisecond), err)
			}
		})
	}
}

// TestFabricHelperProcess is the other process of TestFabricCrossProcess:
// a fabric server of one region that prints its RemoteKey and obeys
// "deregister" and "register" on stdin.
func TestFabricHelperProcess(t *testing.T) {
	prov := os.Getenv("RDMA_FABRIC_HELPER")
	if prov == "" {
		t.Skip("helper process only")
	}
	srv, err := NewFabricServer(FabricOptions{Provider: prov, Node: fabricNode(prov), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	region := newFileRegion(t, 4)
	const seed = 99
	fillPattern(region.Bytes(), seed)
	publish := func() RemoteKey {
		rk := mustRegister(t, srv, region)
		b, _ := json.Marshal(&rk)
		fmt.Printf("helper: key %d %s\n", seed, b)
		return rk
	}
	rk := publish()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "deregister":
			if err := srv.Deregister(rk.Key); err != nil {
				t.Fatal(err)
			}
			fmt.Println("helper: deregistered")
		case "register":
			rk = publish()
		}
	}
}
