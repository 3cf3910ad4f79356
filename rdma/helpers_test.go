package rdma

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/atomicmem"
	"github.com/cellstore/cell/meganode"
)

var _ Region = (*meganode.Region)(nil)

// testLogger logs through t (benchmarks do not log).
func testLogger(t testing.TB) *slog.Logger {
	if _, ok := t.(*testing.B); ok {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// memRegion is a region over heap memory (no file: not shareable).
type memRegion struct {
	id  uint32
	mem []byte
}

func (r *memRegion) ID() uint32    { return r.id }
func (r *memRegion) Bytes() []byte { return r.mem }
func (r *memRegion) Path() string  { return "" }

const (
	testRegionSize   = 8 << 20
	testMeganodeSize = 1 << 20
)

// newFileRegion creates a meganode region of testRegionSize bytes in a test
// directory, closed and removed at cleanup.
func newFileRegion(t testing.TB, id uint32) *meganode.Region {
	t.Helper()
	r, err := meganode.Create(meganode.Options{
		ID: id, Size: testRegionSize, MeganodeSize: testMeganodeSize,
		Dir: t.TempDir(), Name: fmt.Sprintf("region-%d-%d", id, time.Now().UnixNano()),
		Hugepages: meganode.HugepagesOff, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("meganode.Create: %v", err)
	}
	t.Cleanup(func() {
		_ = r.Close()
		_ = r.Remove()
	})
	return r
}

// patternWord is the word the pattern puts at offset off.
func patternWord(seed, off uint64) uint64 {
	z := seed + off*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// fillPattern writes the pattern of seed over all of mem with atomic
// stores.
func fillPattern(mem []byte, seed uint64) {
	buf := atomicmem.Alloc(64 << 10)
	for base := 0; base < len(mem); base += len(buf) {
		n := min(len(buf), len(mem)-base)
		for i := 0; i < n; i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], patternWord(seed, uint64(base+i)))
		}
		atomicmem.Store(mem[base:base+n], buf[:n])
	}
}

// wantPattern returns the pattern's n bytes at off.
func wantPattern(seed, off uint64, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], patternWord(seed, off+uint64(i)))
	}
	return b
}

// checkPattern fails the test unless got holds the pattern's bytes at off.
func checkPattern(t testing.TB, seed, off uint64, got []byte) {
	t.Helper()
	if want := wantPattern(seed, off, len(got)); !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%d bytes at offset %d: first difference at byte %d: got %#x want %#x", len(got), off, i, got[i], want[i])
	}
}

// unaligned returns n bytes starting one byte past an 8-byte boundary.
func unaligned(n int) []byte {
	b := atomicmem.Alloc(n + 8)
	return b[1 : n+1 : n+1]
}

// readMode is how a test issues a read: directly or through Post and a CQ.
type readMode int

const (
	modeSync readMode = iota
	modePost
)

func (m readMode) String() string { return [...]string{"sync", "post"}[m] }

// doRead reads segs with c in the given mode and returns the outcome.
func doRead(ctx context.Context, c Client, mode readMode, rk *RemoteKey, segs []Segment) error {
	if mode == modeSync {
		if len(segs) == 1 {
			return c.Read(ctx, rk, segs[0].Off, segs[0].Dst)
		}
		return c.ReadV(ctx, rk, segs)
	}
	cq := NewCQ(1)
	op := new(Op)
	op.PrepareV(rk, segs)
	if err := c.Post(ctx, op, cq); err != nil {
		return err
	}
	got, err := cq.Wait(context.Background())
	if err != nil {
		return err
	}
	if got != op {
		return errors.New("test: the CQ returned another op")
	}
	return op.Err()
}

// mustRegister registers r with s or fails the test.
func mustRegister(t testing.TB, s Server, r Region) RemoteKey {
	t.Helper()
	rk, err := s.Register(r)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	return rk
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}
