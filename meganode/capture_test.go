package meganode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellstore/cell/blink"
)

// captureLoad changes a region the ways an apply path does, one operation
// at a time, chosen by its rng: puts of small and extent-sized values,
// deletes, extents allocated and freed directly, the root word, meganodes
// made and freed, and whole meganode splits (doc.go's protocol, in one
// call).
type captureLoad struct {
	t      *testing.T
	r      *Region
	rng    *rand.Rand
	ms     []*Meganode // leaf meganodes in use
	keys   map[*Meganode][]string
	blocks [][2]uint64 // extents allocated directly: offset, size
	n      int
	ops    map[string]int
}

func newCaptureLoad(t *testing.T, r *Region, seed uint64) *captureLoad {
	l := &captureLoad{t: t, r: r, rng: rand.New(rand.NewPCG(seed, 7)), keys: map[*Meganode][]string{}, ops: map[string]int{}}
	m, err := r.NewMeganode(0, blink.Full, blink.Options{})
	must(t, err)
	l.ms = append(l.ms, m)
	return l
}

// loadedMemRegion is a region over heap memory that a captureLoad has
// already changed steps times, and that load.
func loadedMemRegion(t *testing.T, id uint32, steps int) (*Region, *captureLoad) {
	r := newMemRegion(t, mustLayout(t, 8<<20, 256<<10, 1024, 64, 4), id)
	load := newCaptureLoad(t, r, rand.Uint64())
	for range steps {
		load.step()
	}
	return r, load
}

// step runs one operation.
func (l *captureLoad) step() {
	t := l.t
	l.n++
	m := l.ms[l.rng.IntN(len(l.ms))]
	switch c := l.rng.IntN(100); {
	case c < 2 && len(l.ms) < 3:
		l.split(m)
	case c < 3:
		l.r.SetRoot(m.Ptr())
		l.ops["root"]++
	case c < 4:
		l.r.SetApplied(uint64(l.n))
		l.ops["applied"]++
	case c < 10:
		size := 1 + l.rng.IntN(9000)
		off, err := l.r.Extents().Alloc(size)
		if errors.Is(err, blink.ErrExtentsFull) {
			return
		}
		must(t, err)
		l.blocks = append(l.blocks, [2]uint64{off, uint64(size)})
		l.ops["alloc"]++
	case c < 14 && len(l.blocks) > 0:
		i := l.rng.IntN(len(l.blocks))
		b := l.blocks[i]
		must(t, l.r.Extents().FreeChecked(b[0], int(b[1])))
		l.blocks = slices.Delete(l.blocks, i, i+1)
		l.ops["free"]++
	case c < 16:
		// A meganode made and freed at once: the slot bitmap twice, a
		// formatted slot left behind.
		e, err := l.r.NewMeganode(0, blink.Full, blink.Options{})
		if errors.Is(err, ErrRegionFull) {
			return
		}
		must(t, err)
		must(t, l.r.FreeMeganode(e.Slot()))
		l.ops["meganode"]++
	case c < 30 && len(l.keys[m]) > 0:
		ks := l.keys[m]
		i := l.rng.IntN(len(ks))
		if ok, err := m.Tree().Delete([]byte(ks[i])); err != nil || !ok {
			t.Fatalf("delete %q: %v %v", ks[i], ok, err)
		}
		l.keys[m] = slices.Delete(ks, i, i+1)
		l.ops["delete"]++
	default:
		key := fmt.Sprintf("key-%08x", l.rng.Uint32())
		size := 1 + l.rng.IntN(40)
		if l.rng.IntN(4) == 0 {
			size = 100 + l.rng.IntN(3000)
		}
		val := bytes.Repeat([]byte{byte(l.n)}, size)
		err := m.Tree().Put([]byte(key), val)
		if errors.Is(err, blink.ErrNeedsSplit) || errors.Is(err, blink.ErrExtentsFull) || errors.Is(err, blink.ErrKeyOutOfRange) {
			return
		}
		must(t, err)
		l.keys[m] = append(l.keys[m], key)
		l.ops["put"]++
	}
}

// split moves the upper half of m into a new meganode.
func (l *captureLoad) split(x *Meganode) {
	t := l.t
	sep, err := x.Tree().SplitKey()
	if err != nil {
		return // too little to split yet
	}
	must(t, x.Tree().Freeze(sep))
	h, err := x.Tree().Header()
	must(t, err)
	y, err := l.r.NewMeganode(h.Level, blink.Bounds{Min: sep, Max: h.Bounds.Max, MaxInf: h.Bounds.MaxInf}, blink.Options{})
	if errors.Is(err, ErrRegionFull) {
		must(t, x.Tree().Thaw())
		return
	}
	must(t, err)
	must(t, y.Tree().BeginCopy(x.Tree().Right()))
	for from := sep; from != nil; {
		from, err = blink.CopyRight(x.Tree(), y.Tree(), from, 2)
		must(t, err)
	}
	must(t, x.Tree().LinkRight(y.Tree().Root()))
	for {
		done, err := x.Tree().FreeRight(4)
		must(t, err)
		if done {
			break
		}
	}
	must(t, x.Tree().Thaw())
	must(t, y.Tree().Thaw())
	var left, right []string
	for _, k := range l.keys[x] {
		if k < string(sep) {
			left = append(left, k)
		} else {
			right = append(right, k)
		}
	}
	l.keys[x], l.keys[y] = left, right
	l.ms = append(l.ms, y)
	l.ops["split"]++
}

// stepWriter is an io.Writer that runs a few operations of a load before
// every write it passes on: writers going on while a capture writes.
type stepWriter struct {
	w     io.Writer
	load  *captureLoad
	steps int
}

func (s *stepWriter) Write(b []byte) (int, error) {
	for range s.steps {
		s.load.step()
	}
	return s.w.Write(b)
}

// TestCaptureIsTheImageAtItsMoment: a capture's image, written while the
// region is changed between every run it writes (every kind of write an
// apply path makes), is byte for byte the image WriteImage wrote at the
// capture's moment; it round-trips; and the region itself is as the
// changes left it.
func TestCaptureIsTheImageAtItsMoment(t *testing.T) {
	for _, backing := range []string{"heap", "file", "shm"} {
		t.Run(backing, func(t *testing.T) {
			var r *Region
			opts := imageOptions(t, backing)
			if backing == "heap" {
				r = newMemRegion(t, mustLayout(t, 8<<20, 256<<10, 1024, 64, 4), 0x51)
			} else {
				r = mustCreateBacking(t, opts, backing)
			}
			seed := rand.Uint64()
			t.Logf("seed %d, %v", seed, r)
			load := newCaptureLoad(t, r, seed)
			for range 400 {
				load.step()
			}
			saved := 0
			for round := range 6 {
				want, _ := mustImage(t, r)
				c, err := r.Capture()
				must(t, err)
				var got bytes.Buffer
				// Fewer changes a run early on (the image's first
				// pages), more later.
				st, err := c.WriteImage(&stepWriter{w: &got, load: load, steps: 1 + 3*round})
				must(t, err)
				if pages, _ := c.Saved(); pages > 0 {
					saved++
				}
				c.Close()
				if st.Bytes != uint64(got.Len()) {
					t.Fatalf("round %d: stats say %d bytes, wrote %d", round, st.Bytes, got.Len())
				}
				if !bytes.Equal(got.Bytes(), want) {
					t.Fatalf("round %d: the captured image (%d bytes) is not the image at the capture (%d bytes)", round, got.Len(), len(want))
				}
				if backing != "heap" {
					ropts := opts
					ropts.Name = fmt.Sprintf("%s-restored-%d", opts.Name, round)
					dst := mustRestore(t, ropts, got.Bytes())
					again, _ := mustImage(t, dst)
					if !bytes.Equal(again, want) {
						t.Fatalf("round %d: the region restored from the captured image images differently", round)
					}
					must(t, dst.Close())
					must(t, dst.Remove())
				}
			}
			t.Logf("operations while capturing: %v", load.ops)
			if saved == 0 {
				t.Fatal("no capture saved a page: the writes never met a page the capture had not written yet")
			}
			if load.ops["split"] == 0 || load.ops["put"] == 0 {
				t.Fatalf("the load made no split or no put: %v", load.ops)
			}
		})
	}
}

// TestCaptureConcurrentWriter: the same with the load in its own
// goroutine, over heap memory (which the race detector watches): a capture
// reads a page only while no writer can be writing it.
func TestCaptureConcurrentWriter(t *testing.T) {
	r, load := loadedMemRegion(t, 0x52, 400)
	for round := range 4 {
		want, _ := mustImage(t, r)
		c, err := r.Capture()
		must(t, err)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					load.step()
				}
			}
		})
		var got bytes.Buffer
		_, err = c.WriteImage(&got)
		close(stop)
		wg.Wait()
		must(t, err)
		c.Close()
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("round %d: the captured image is not the image at the capture", round)
		}
	}
}

// TestCaptureAnnouncesEveryWrite: every store the region's trees, extent
// allocator and setters make is announced (beforeWrite) before it is
// made. The region's mapping is made read-only and beforeWrite opens just
// the pages announced; a store anywhere else faults, which
// debug.SetPanicOnFault turns into a panic this test reports.
func TestCaptureAnnouncesEveryWrite(t *testing.T) {
	r := mustCreateBacking(t, imageOptions(t, "shm"), "shm")
	data := r.m.data
	protect := func(prot int) {
		if err := unix.Mprotect(data, prot); err != nil {
			t.Fatal(err)
		}
	}
	pageSize := uint64(unix.Getpagesize())
	r.testBeforeWrite = func(off, n uint64) {
		lo, hi := off&^(pageSize-1), alignUp(off+n, pageSize)
		if err := unix.Mprotect(data[lo:hi], unix.PROT_READ|unix.PROT_WRITE); err != nil {
			panic(err)
		}
	}
	defer func() { r.testBeforeWrite = nil; protect(unix.PROT_READ | unix.PROT_WRITE) }()
	load := newCaptureLoad(t, r, rand.Uint64())
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	step := func() (fault any) {
		defer func() { fault = recover() }()
		protect(unix.PROT_READ)
		load.step()
		return nil
	}
	for i := range 3000 {
		if fault := step(); fault != nil {
			protect(unix.PROT_READ | unix.PROT_WRITE)
			t.Fatalf("operation %d (%v so far) stored to the region without announcing it: %v", i, load.ops, fault)
		}
	}
	protect(unix.PROT_READ | unix.PROT_WRITE)
	t.Logf("operations: %v", load.ops)
	if load.ops["split"] == 0 {
		t.Fatalf("no split among the operations: %v", load.ops)
	}
}

// TestCapturesTogether: captures taken at two moments are open together,
// the region changed before, between and while they write; each image is
// the region at its own moment.
func TestCapturesTogether(t *testing.T) {
	r, load := loadedMemRegion(t, 0x53, 300)
	want1, _ := mustImage(t, r)
	c1, err := r.Capture()
	must(t, err)
	for range 100 {
		load.step()
	}
	want2, _ := mustImage(t, r)
	c2, err := r.Capture()
	must(t, err)
	var got1, got2 bytes.Buffer
	_, err = c2.WriteImage(&stepWriter{w: &got2, load: load, steps: 3})
	must(t, err)
	c2.Close()
	_, err = c1.WriteImage(&stepWriter{w: &got1, load: load, steps: 3})
	must(t, err)
	c1.Close()
	c1.Close()
	if !bytes.Equal(got1.Bytes(), want1) || !bytes.Equal(got2.Bytes(), want2) {
		t.Fatalf("images of two open captures: first matches %v, second %v", bytes.Equal(got1.Bytes(), want1), bytes.Equal(got2.Bytes(), want2))
	}
	if cs := r.captures(); len(cs) != 0 {
		t.Fatalf("%d captures open after both closed", len(cs))
	}
}

// TestCaptureRegionClosed: closing the region ends its capture; the
// capture's image fails with ErrClosed, before or during its writing.
func TestCaptureRegionClosed(t *testing.T) {
	r := mustCreateBacking(t, imageOptions(t, "shm"), "shm")
	load := newCaptureLoad(t, r, 1)
	for range 300 {
		load.step()
	}
	c, err := r.Capture()
	must(t, err)
	closing := &closeWriter{w: io.Discard, after: 2, close: func() { must(t, r.Close()) }}
	if _, err := c.WriteImage(closing); !errors.Is(err, ErrClosed) {
		t.Fatalf("capture of a region closed while it wrote: %v, want ErrClosed", err)
	}
	if _, err := c.WriteImage(io.Discard); !errors.Is(err, ErrClosed) {
		t.Fatalf("capture of a closed region: %v, want ErrClosed", err)
	}
	c.Close()
	if _, err := r.Capture(); !errors.Is(err, ErrClosed) {
		t.Fatalf("capture of a closed region: %v, want ErrClosed", err)
	}
}

// closeWriter calls close once after its first after writes.
type closeWriter struct {
	w     io.Writer
	after int
	close func()
}

func (c *closeWriter) Write(b []byte) (int, error) {
	if c.after--; c.after == 0 {
		c.close()
	}
	return c.w.Write(b)
}
