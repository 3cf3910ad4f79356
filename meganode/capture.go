package meganode

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
)

// Copy-on-write images. Region.WriteImage needs every writer stopped
// while it reads the region, so the time a snapshot holds writes grows with the
// region's data. A Capture takes the image's moment at once instead:
// Region.Capture (writers stopped for that call only) starts it, and from
// then on every writer of the region saves the 4 KiB pages it is about to
// change, the first time it changes each, before it changes them.
// Capture.WriteImage then writes the image while writers go on: each page as
// a writer saved it, or, for a page no writer touched yet, as it is in the
// region, which is then the same thing. The bytes are those WriteImage
// would have written at the moment of the Capture call.
//
// Every store into the region goes through one of a few places, and each
// tells the region first (beforeWrite): the blink trees (Options.BeforeWrite,
// set by the region for its meganodes: nodes published, extent records
// stored), the extent allocator (control bytes and free list words), the
// slot bitmap and the root word. Region.Bytes is read-only to everyone
// else.
//
// Each page is settled once, under the capture's mutex: by a writer that
// saves it before its first change, or by WriteImage that copies it out of
// the region. A page WriteImage copied is not saved again, and WriteImage uses
// the saved copy of a page a writer settled first; a writer changes a page
// only once it is settled, so the page WriteImage copies under the mutex is
// never being written. What the capture holds is bounded by the pages
// changed while it is open: at most the region's data.
//
// Captures of a region may be open together (a snapshot being written
// and a replica hash, say): each writer saves for each. Close ends one.
// Closing the region ends every open capture too: their WriteImage then
// fails with ErrClosed.

// Capture is an image of a region at one moment, written out while the
// region's writers go on. Its methods are safe for concurrent use.
type Capture struct {
	r *Region
	h header

	mu    sync.Mutex
	ended bool
	// settled has a bit per page of the region: its bytes at the capture's
	// moment are in saved, or WriteImage has copied them.
	settled []uint64
	// saved holds the pages writers saved before changing them, by page
	// index; nil for a page that was all zero.
	saved map[uint64][]byte
	// savedPages counts every page a writer settled, savedBytes the
	// bytes it copied for them (a page that was all zero costs none),
	// written out since or not.
	savedPages uint64
	savedBytes uint64
}

// Capture starts a copy-on-write image of the region as it is now.
//
// REQUIRES: no writer changes the region during the call (the caller holds
// its apply lock); from its return writers may go on. It returns
// ErrClosed when the region is closed.
func (r *Region) Capture() (*Capture, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return nil, ErrClosed
	}
	pages := (r.lay.Size + imagePageSize - 1) / imagePageSize
	c := &Capture{r: r, h: header{Layout: r.lay, ID: r.id}, settled: make([]uint64, (pages+63)/64), saved: make(map[uint64][]byte)}
	r.setCapturesLocked(append(slices.Clone(r.captures()), c))
	return c, nil
}

// captures returns the open captures (the slice is never changed).
func (r *Region) captures() []*Capture {
	if cs := r.openCaptures.Load(); cs != nil {
		return *cs
	}
	return nil
}

// setCapturesLocked publishes the open captures. REQUIRES: r.mu held.
func (r *Region) setCapturesLocked(cs []*Capture) {
	if len(cs) == 0 {
		r.openCaptures.Store(nil)
		return
	}
	r.openCaptures.Store(&cs)
}

// beforeWrite is told of every change to bytes [off, off+n) of the region
// before it is made: an open capture saves each page of them it has not
// settled yet. Called by the region's writers only (an apply path; the
// trees and the allocator hold their own locks).
func (r *Region) beforeWrite(off, n uint64) {
	if r.testBeforeWrite != nil {
		r.testBeforeWrite(off, n)
	}
	if cs := r.openCaptures.Load(); cs != nil {
		for _, c := range *cs {
			c.save(off, n)
		}
	}
}

// save settles the pages of [off, off+n) that are not settled yet with
// their present bytes.
func (c *Capture) save(off, n uint64) {
	if n == 0 {
		return
	}
	mem := c.r.mem
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	for p := off / imagePageSize; p <= (off+n-1)/imagePageSize; p++ {
		if c.isSettled(p) {
			continue
		}
		c.settle(p)
		c.savedPages++
		page := mem[p*imagePageSize : (p+1)*imagePageSize]
		if isZero(page) {
			c.saved[p] = nil
			continue
		}
		c.saved[p] = append([]byte(nil), page...)
		c.savedBytes += imagePageSize
	}
}

func (c *Capture) isSettled(p uint64) bool { return c.settled[p/64]&(1<<(p%64)) != 0 }
func (c *Capture) settle(p uint64)         { c.settled[p/64] |= 1 << (p % 64) }

// copyPage puts the captured bytes of page p into dst (imagePageSize
// bytes) and reports whether they are all zero.
func (c *Capture) copyPage(dst []byte, p uint64) (zero bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return false, ErrClosed
	}
	if c.isSettled(p) {
		saved, ok := c.saved[p]
		if !ok {
			// WriteImage reads each page once; settled by it means read.
			return false, fmt.Errorf("meganode: capture of region %d read page %d twice", c.r.id, p)
		}
		if saved == nil {
			return true, nil
		}
		copy(dst, saved)
		delete(c.saved, p)
		return false, nil
	}
	c.settle(p)
	off := p * imagePageSize
	copy(dst, c.r.mem[off:off+imagePageSize])
	return isZero(dst), nil
}

// WriteImage writes the image of the region as it was when Capture was
// called, in WriteImage's format, while writers go on. It returns what it
// wrote; an error of w's comes wrapped. It may be called once.
func (c *Capture) WriteImage(w io.Writer) (ImageStats, error) {
	r := c.r
	next := scanAll
	if r.m != nil {
		endScan := r.m.adviseScan()
		defer endScan()
		next = func(off, size uint64) (uint64, uint64, bool) {
			// The data ranges of the file now: a superset of those at
			// the capture's moment (pages are written, never punched
			// out); a page that was a hole then was saved as zero by
			// its first writer.
			c.mu.Lock()
			ended := c.ended
			c.mu.Unlock()
			if ended {
				return 0, 0, false
			}
			return r.m.nextData(off, size)
		}
	}
	st, err := writePages(w, c.h, next, c.copyPage)
	if err == nil {
		c.mu.Lock()
		if c.ended {
			err = ErrClosed
		}
		c.mu.Unlock()
	}
	if err != nil {
		return st, fmt.Errorf("meganode: captured image of region %d: %w", r.id, err)
	}
	r.log.Debug("meganode: captured region image written", slog.Uint64("region", uint64(r.id)),
		slog.Uint64("pages", st.Pages), slog.Uint64("bytes", st.Bytes))
	return st, nil
}

// Saved returns how many pages writers have saved since the capture
// began, and the bytes they copied to do so (pages that were all zero
// cost none): at most what the capture held in memory beyond the region.
func (c *Capture) Saved() (pages, bytes uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.savedPages, c.savedBytes
}

// Close ends the capture: writers stop saving pages for it, and the saved
// ones are dropped. Closing twice is a no-op.
func (c *Capture) Close() {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	c.endLocked()
}

// endLocked ends the capture and takes it off the region's open ones.
// REQUIRES: c.r.mu held.
func (c *Capture) endLocked() {
	c.mu.Lock()
	c.ended = true
	c.saved = nil
	c.mu.Unlock()
	r := c.r
	r.setCapturesLocked(slices.DeleteFunc(slices.Clone(r.captures()), func(o *Capture) bool { return o == c }))
}
