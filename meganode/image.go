package meganode

// This file defines region images, the bytes of a region as raft ships them
// in a snapshot (Region.WriteImage) and rebuilds a region from
// (RestoreImage). The constants below are part of Cell's wire format: a
// change is a format change (bump imageVersion; the golden dump
// testdata/region_image_stream.golden pins the bytes).
//
// An image is the region's layout, then every 4 KiB page of the region that
// is not all zero, in increasing offset order, grouped into runs of
// consecutive pages. Pages not in any run are zero. All integers are
// little-endian at fixed offsets:
//
//	+--------------------+
//	| header (48 bytes)  |
//	+--------------------+
//	| run 0              |  frame (16 bytes) + length bytes of pages
//	| run 1              |
//	| ...                |
//	| end run            |  frame with offset ^0, length 16, + trailer
//	+--------------------+
//
// Header:
//
//	 0  magic "CELI" u32        4  version u32 (1)
//	 8  page size u32 (4096)   12  region ID u32
//	16  region size u64        24  meganode size u64
//	32  node size u32          36  meganode slots u32
//	40  atom size u32          44  CRC-32C (Castagnoli) of bytes [0, 44) u32
//	48  first run
//
// The header holds the inputs of the region's Layout (computeLayout), so a
// reader can check an image against what it expects before it reads a page.
//
// Run:
//
//	 0  region offset u64, a multiple of the page size
//	 8  length u32: 1 to 256 pages (1 MiB), whole pages
//	12  CRC-32C of frame bytes [0, 12) followed by the length data bytes u32
//	16  data: the region's bytes [offset, offset+length)
//
// Runs are in strictly increasing offset order and do not overlap; each
// lies inside [0, region size). The writer emits maximal runs of non-zero
// pages (split every 1 MiB); a reader accepts any runs that follow these
// rules, zero pages included.
//
// End run and trailer:
//
//	 0  offset u64 = 0xffffffffffffffff
//	 8  length u32 = 16 (the trailer)
//	12  CRC-32C of frame bytes [0, 12) followed by the trailer u32
//	16  run count u64: data runs, the end run not counted
//	24  image bytes u64: the whole image, header to trailer included
//	32  end of image
//
// The region's own header is page 0 of the image (a region header is never
// all zero), and it must agree with the image header (ID and layout).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"

	"github.com/cellstore/cell/blink"
)

// Image header offsets.
const (
	imgOffMagic        = 0
	imgOffVersion      = 4
	imgOffPageSize     = 8
	imgOffRegionID     = 12
	imgOffRegionSize   = 16
	imgOffMeganodeSize = 24
	imgOffNodeSize     = 32
	imgOffSlots        = 36
	imgOffAtomSize     = 40
	imgOffCRC          = 44
	imageHeaderSize    = 48
)

// Run frame and trailer offsets.
const (
	runOffOffset = 0
	runOffLength = 8
	runOffCRC    = 12
	runFrameSize = 16

	trailerOffRuns  = 0
	trailerOffBytes = 8
	trailerSize     = 16
)

const (
	imageMagic   = 0x494c4543 // "CELI" little-endian
	imageVersion = 1
	// imagePageSize is the unit of runs and of the zero-page test.
	imagePageSize = 4096
	// maxRunLength caps a run: the writer's buffer, and the largest read
	// a reader trusts a frame for.
	maxRunLength = 1 << 20
	// endRunOffset marks the end run.
	endRunOffset = ^uint64(0)
)

// ImageStats describe a region image.
type ImageStats struct {
	// Pages is the number of 4 KiB pages in the image's runs.
	Pages uint64
	// Bytes is the image's length: header, runs with their frames, end run
	// and trailer.
	Bytes uint64
	// RegionSize is the size of the region the image holds.
	RegionSize uint64
}

// WriteImage writes an image of the region to w: the region's layout and
// every page that is not all zero (the format is drawn in image.go). It
// returns what it wrote; on error, the stats so far and an error wrapping
// w's.
//
// REQUIRES: no writer changes the region meanwhile (the caller holds its
// apply lock: no tree mutation, extent Alloc or Free, meganode slot change
// or SetRoot), and the region is not closed meanwhile. Concurrent readers
// are fine.
//
// The region is read with plain loads (copy, and an 8-byte zero test), not
// atomicmem: with every writer excluded nothing WriteImage reads is being
// stored to, and the lock-free and one-sided readers that may run
// meanwhile only load, which never races with a load. The image is a
// consistent snapshot because of the REQUIRES, not because of this code: a
// writer running anyway would make a mix of old and new pages, each run's
// CRC matching what was written, which RestoreImage cannot tell.
//
// Holes are not faulted in. On tmpfs (/dev/shm) and plain files the file's
// data ranges are found with lseek(SEEK_DATA, SEEK_HOLE), and only they are
// read: reading a hole through the shared mapping would fault a page in for
// it (allocated on tmpfs unless fallocate committed it, cached and read
// ahead around for a plain file), so a scan of a mostly empty 1 GiB region
// would map 1 GiB. Read-ahead is turned off on a plain file's mapping while
// WriteImage runs (MADV_RANDOM), else it would cache the holes ahead of the
// scan, which SEEK_DATA then reports as data. Where the file system cannot
// tell (hugetlbfs, whose lseek calls every page data; or lseek fails) every
// page is read; on hugetlbfs those pages were reserved when the region was
// mapped, so this costs time, not memory. Within data ranges, all-zero
// pages are skipped.
func (r *Region) WriteImage(w io.Writer) (ImageStats, error) {
	r.mu.Lock()
	closed := r.mu.closed
	r.mu.Unlock()
	if closed {
		return ImageStats{}, ErrClosed
	}
	next := scanAll
	if r.m != nil {
		next = r.m.nextData
		endScan := r.m.adviseScan()
		defer endScan()
	}
	st, err := writeImage(w, r.mem, header{Layout: r.lay, ID: r.id}, next)
	if err != nil {
		return st, fmt.Errorf("meganode: image of region %d: %w", r.id, err)
	}
	r.log.Debug("meganode: region image written", slog.Uint64("region", uint64(r.id)),
		slog.Uint64("pages", st.Pages), slog.Uint64("bytes", st.Bytes))
	return st, nil
}

// RestoreImage creates a region from an image read from img, as Create does
// with opts (ID, Dir, ShmDir, HugetlbfsDir, Name, Hugepages, Logger): it
// picks the backing, creates the file (never over an existing one: the
// error then wraps fs.ErrExist), writes the image's pages into it, checks
// the region header (magic, version, CRC, ID, layout) and opens the region
// as Open would (the extent allocator's every control byte and free list;
// the slots in use). The returned region's Path is the file opts name, and
// it resumes allocation exactly where the imaged region stood.
//
// The layout comes from the image. opts.ID must be the image's region ID,
// and the layout fields opts sets (Size, MeganodeSize, NodeSize, AtomSize,
// Meganodes or NodeFraction) must describe the image's layout; fields left
// zero are taken from the image. A mismatch returns an error wrapping
// ErrImageMismatch before any file is created.
//
// A truncated or corrupt image returns an error wrapping ErrCorruption
// (and io.ErrUnexpectedEOF for a truncated one); an error reading img is
// returned wrapped. On any error no file is left behind. RestoreImage
// reads exactly the image's bytes from img, no further, so images may be
// followed by other data in one stream; it reads frames in 16-byte reads,
// so give it a buffered reader.
func RestoreImage(opts Options, img io.Reader) (_ *Region, err error) {
	h, err := readImageHeader(img)
	if err != nil {
		return nil, err
	}
	if err := opts.adoptImage(h); err != nil {
		return nil, err
	}
	m, err := createMapping(&opts, h.Size)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = m.close()
			_ = os.Remove(m.path)
		}
	}()
	mem := m.data[:h.Size:h.Size]
	st, ext, err := restoreInto(m, mem, img, h)
	if err != nil {
		return nil, fmt.Errorf("meganode: restore region %d into %s: %w", h.ID, m.path, err)
	}
	r := newRegion(opts.Logger, m, mem, h, ext)
	r.log.Info("meganode: region restored from an image",
		append(r.logAttrs(), slog.Uint64("pages", st.Pages), slog.Uint64("image_bytes", st.Bytes))...)
	return r, nil
}

// restoreInto writes the runs of an image whose header h was read into the
// memory of the new region mapped by m, and checks the result. Read-ahead
// is off on a plain file's mapping meanwhile: the faults would read ahead
// around every page written, and around the holes of the control bytes
// the check reads.
func restoreInto(m *mapping, mem []byte, img io.Reader, h header) (ImageStats, *Extents, error) {
	endScan := m.adviseScan()
	defer endScan()
	st, err := readImageRuns(img, mem, h.Size)
	if err != nil {
		return st, nil, err
	}
	ext, err := openRestored(mem, h)
	return st, ext, err
}

// adoptImage fills the layout fields o leaves zero from the image header h,
// applies the defaults and checks that o then describes h's region.
// Errors wrap ErrImageMismatch, or ErrInvalidOptions for options that are
// invalid whatever the image.
func (o *Options) adoptImage(h header) error {
	if o.Size == 0 {
		o.Size = h.Size
	}
	if o.MeganodeSize == 0 {
		o.MeganodeSize = h.MeganodeSize
	}
	if o.NodeSize == 0 {
		o.NodeSize = int(h.NodeSize)
	}
	if o.AtomSize == 0 {
		o.AtomSize = int(h.AtomSize)
	}
	if o.Meganodes == 0 && o.NodeFraction == 0 {
		o.Meganodes = int(h.Slots)
	}
	o.EnsureDefaults()
	if o.ID != h.ID {
		return fmt.Errorf("meganode: image of region %d, options ask for region %d: %w", h.ID, o.ID, ErrImageMismatch)
	}
	l, err := o.layout()
	if err == nil && l != h.Layout {
		return fmt.Errorf("meganode: image of region %d has layout %s, options ask for %s: %w", h.ID, layoutInputs(h.Layout), layoutInputs(l), ErrImageMismatch)
	}
	return o.Validate()
}

// layoutInputs names the parameters a layout is computed from.
func layoutInputs(l Layout) string {
	return fmt.Sprintf("{size %d, meganode size %d, node size %d, %d slots, atom size %d}", l.Size, l.MeganodeSize, l.NodeSize, l.Slots, l.AtomSize)
}

// nextDataFunc returns the first range [start, end) of [off, size) whose
// pages may hold non-zero bytes, with off <= start < end <= size, or false
// when every byte of [off, size) is zero. Ranges it skips must read as zero;
// ranges it returns may hold zero pages too.
type nextDataFunc func(off, size uint64) (start, end uint64, ok bool)

// scanAll is the nextDataFunc that knows nothing: everything may be data.
func scanAll(off, size uint64) (uint64, uint64, bool) { return off, size, off < size }

// writeImage writes the image of the region in mem (h.Size bytes), reading
// only the ranges nextData returns.
func writeImage(w io.Writer, mem []byte, h header, nextData nextDataFunc) (ImageStats, error) {
	return writePages(w, h, nextData, func(dst []byte, p uint64) (bool, error) {
		page := mem[p*imagePageSize : (p+1)*imagePageSize]
		if isZero(page) {
			return true, nil
		}
		copy(dst, page)
		return false, nil
	})
}

// pageFunc puts the bytes of page p (region offset p × imagePageSize) into
// dst, imagePageSize bytes, or reports that they are all zero (dst is then
// left as it is).
type pageFunc func(dst []byte, p uint64) (zero bool, err error)

// writePages writes the image of the region h describes: its header, then
// the pages page gives in the ranges nextData returns, but for the zero
// ones, in runs.
func writePages(w io.Writer, h header, nextData nextDataFunc, page pageFunc) (ImageStats, error) {
	iw := imageWriter{w: w, buf: make([]byte, runFrameSize+maxRunLength)}
	iw.stats.RegionSize = h.Size
	var hdr [imageHeaderSize]byte
	encodeImageHeader(hdr[:], h)
	if err := iw.write(hdr[:]); err != nil {
		return iw.stats, err
	}
	size := h.Size
	for off := uint64(0); off < size; {
		start, end, ok := nextData(off, size)
		if !ok {
			break
		}
		// Whole pages, never backwards: off is page aligned.
		start = max(off, start&^(imagePageSize-1))
		end = min(size, alignUp(end, imagePageSize))
		if start >= end {
			// A confused nextData: read the rest rather than loop.
			start, end = off, size
		}
		for p := start; p < end; p += imagePageSize {
			dst, err := iw.slot(p)
			if err != nil {
				return iw.stats, err
			}
			zero, err := page(dst, p/imagePageSize)
			if err != nil {
				return iw.stats, err
			}
			if !zero {
				iw.fill(p)
			}
		}
		off = end
	}
	if err := iw.flush(); err != nil {
		return iw.stats, err
	}
	return iw.stats, iw.end()
}

// imageWriter gathers pages into runs.
type imageWriter struct {
	w      io.Writer
	buf    []byte // frame, then up to maxRunLength bytes of the run
	runOff uint64 // region offset of the run in buf
	runLen uint64 // bytes of pages in buf; 0 when no run is open
	runs   uint64
	stats  ImageStats
}

func (iw *imageWriter) write(b []byte) error {
	n, err := iw.w.Write(b)
	iw.stats.Bytes += uint64(n)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	return err
}

// slot returns where the page at region offset off goes in the open run,
// having written the run and started a new one when the page does not
// extend it. (A page that turns out zero ends the run all the same: the
// next page written does not extend it.)
func (iw *imageWriter) slot(off uint64) ([]byte, error) {
	if iw.runLen > 0 && (off != iw.runOff+iw.runLen || iw.runLen == maxRunLength) {
		if err := iw.flush(); err != nil {
			return nil, err
		}
	}
	b := iw.buf[runFrameSize+iw.runLen:]
	return b[:imagePageSize:imagePageSize], nil
}

// fill adds the page slot(off) returned, now holding the page's bytes, to
// the run.
func (iw *imageWriter) fill(off uint64) {
	if iw.runLen == 0 {
		iw.runOff = off
	}
	iw.runLen += imagePageSize
	iw.stats.Pages++
}

// flush writes the open run, if any.
func (iw *imageWriter) flush() error {
	if iw.runLen == 0 {
		return nil
	}
	b := iw.buf[:runFrameSize+iw.runLen]
	putFrame(b, iw.runOff, iw.runLen)
	iw.runLen = 0
	iw.runs++
	return iw.write(b)
}

// end writes the end run and trailer.
func (iw *imageWriter) end() error {
	var b [runFrameSize + trailerSize]byte
	le := binary.LittleEndian
	le.PutUint64(b[runFrameSize+trailerOffRuns:], iw.runs)
	le.PutUint64(b[runFrameSize+trailerOffBytes:], iw.stats.Bytes+uint64(len(b)))
	putFrame(b[:], endRunOffset, trailerSize)
	return iw.write(b[:])
}

// putFrame fills the frame at the start of b for the length bytes that
// follow it.
func putFrame(b []byte, off, length uint64) {
	le := binary.LittleEndian
	le.PutUint64(b[runOffOffset:], off)
	le.PutUint32(b[runOffLength:], uint32(length))
	le.PutUint32(b[runOffCRC:], frameCRC(b[:runOffCRC], b[runFrameSize:runFrameSize+length]))
}

func frameCRC(frame, data []byte) uint32 {
	return crc32.Update(crc32.Checksum(frame, castagnoli), castagnoli, data)
}

// isZero reports whether b, a multiple of 64 bytes long, is all zero. It
// tests 8 bytes at a time, eight words per step.
func isZero(b []byte) bool {
	le := binary.LittleEndian
	for ; len(b) >= 64; b = b[64:] {
		if le.Uint64(b)|le.Uint64(b[8:])|le.Uint64(b[16:])|le.Uint64(b[24:])|
			le.Uint64(b[32:])|le.Uint64(b[40:])|le.Uint64(b[48:])|le.Uint64(b[56:]) != 0 {
			return false
		}
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// encodeImageHeader writes the image header of region h into b (at least
// imageHeaderSize bytes).
func encodeImageHeader(b []byte, h header) {
	le := binary.LittleEndian
	le.PutUint32(b[imgOffMagic:], imageMagic)
	le.PutUint32(b[imgOffVersion:], imageVersion)
	le.PutUint32(b[imgOffPageSize:], imagePageSize)
	le.PutUint32(b[imgOffRegionID:], h.ID)
	le.PutUint64(b[imgOffRegionSize:], h.Size)
	le.PutUint64(b[imgOffMeganodeSize:], h.MeganodeSize)
	le.PutUint32(b[imgOffNodeSize:], uint32(h.NodeSize))
	le.PutUint32(b[imgOffSlots:], uint32(h.Slots))
	le.PutUint32(b[imgOffAtomSize:], uint32(h.AtomSize))
	le.PutUint32(b[imgOffCRC:], crc32.Checksum(b[:imgOffCRC], castagnoli))
}

// decodeImageHeader checks an image header and returns the region it
// describes. Errors wrap ErrCorruption. It never panics.
func decodeImageHeader(b []byte) (header, error) {
	if len(b) < imageHeaderSize {
		return header{}, fmt.Errorf("meganode: image header of %d bytes, want %d: %w", len(b), imageHeaderSize, ErrCorruption)
	}
	le := binary.LittleEndian
	if m := le.Uint32(b[imgOffMagic:]); m != imageMagic {
		return header{}, fmt.Errorf("meganode: bad image magic %#08x: %w", m, ErrCorruption)
	}
	if v := le.Uint32(b[imgOffVersion:]); v != imageVersion {
		return header{}, fmt.Errorf("meganode: image format version %d, want %d: %w", v, imageVersion, ErrCorruption)
	}
	if got, want := le.Uint32(b[imgOffCRC:]), crc32.Checksum(b[:imgOffCRC], castagnoli); got != want {
		return header{}, fmt.Errorf("meganode: image header CRC %#08x, computed %#08x: %w", got, want, ErrCorruption)
	}
	if ps := le.Uint32(b[imgOffPageSize:]); ps != imagePageSize {
		return header{}, fmt.Errorf("meganode: image page size %d, want %d: %w", ps, imagePageSize, ErrCorruption)
	}
	id := le.Uint32(b[imgOffRegionID:])
	if id > blink.MaxRegionID {
		return header{}, fmt.Errorf("meganode: image of region ID %d out of range: %w", id, ErrCorruption)
	}
	l, err := computeLayout(le.Uint64(b[imgOffRegionSize:]), le.Uint64(b[imgOffMeganodeSize:]),
		uint64(le.Uint32(b[imgOffNodeSize:])), uint64(le.Uint32(b[imgOffAtomSize:])), uint64(le.Uint32(b[imgOffSlots:])))
	if err != nil {
		return header{}, fmt.Errorf("meganode: image header: %w: %w", err, ErrCorruption)
	}
	return header{Layout: l, ID: id}, nil
}

// readImageHeader reads and decodes the image header from r.
func readImageHeader(r io.Reader) (header, error) {
	var b [imageHeaderSize]byte
	if err := readFull(r, b[:]); err != nil {
		return header{}, fmt.Errorf("meganode: image header: %w", err)
	}
	return decodeImageHeader(b[:])
}

// readImageRuns reads the runs and trailer of an image from r, after its
// header, writing each run into mem (the region, zero where the image has
// no run; len(mem) is the region size). Every frame is checked before it
// is used: offsets and lengths against the region and the previous run,
// then the CRC, and at the end the trailer's counts against what was read.
// Errors wrap ErrCorruption, or r's error. It never panics.
func readImageRuns(r io.Reader, mem []byte, size uint64) (ImageStats, error) {
	le := binary.LittleEndian
	st := ImageStats{RegionSize: size, Bytes: imageHeaderSize}
	var runs, next uint64 // next: the lowest offset the next run may start at
	var frame [runFrameSize]byte
	for {
		if err := readFull(r, frame[:]); err != nil {
			return st, fmt.Errorf("meganode: image frame of run %d: %w", runs, err)
		}
		off, length := le.Uint64(frame[runOffOffset:]), uint64(le.Uint32(frame[runOffLength:]))
		if off == endRunOffset {
			if length != trailerSize {
				return st, fmt.Errorf("meganode: image end run of %d bytes, want %d: %w", length, trailerSize, ErrCorruption)
			}
			var t [trailerSize]byte
			if err := readFull(r, t[:]); err != nil {
				return st, fmt.Errorf("meganode: image trailer: %w", err)
			}
			if got, want := le.Uint32(frame[runOffCRC:]), frameCRC(frame[:runOffCRC], t[:]); got != want {
				return st, fmt.Errorf("meganode: image trailer CRC %#08x, computed %#08x: %w", got, want, ErrCorruption)
			}
			st.Bytes += runFrameSize + trailerSize
			if n, b := le.Uint64(t[trailerOffRuns:]), le.Uint64(t[trailerOffBytes:]); n != runs || b != st.Bytes {
				return st, fmt.Errorf("meganode: image trailer says %d runs in %d bytes, read %d runs in %d bytes: %w", n, b, runs, st.Bytes, ErrCorruption)
			}
			return st, nil
		}
		switch {
		case length == 0 || length > maxRunLength || length%imagePageSize != 0:
			return st, fmt.Errorf("meganode: image run %d at %#x has length %d, want 1 to %d whole pages: %w", runs, off, length, maxRunLength/imagePageSize, ErrCorruption)
		case off%imagePageSize != 0:
			return st, fmt.Errorf("meganode: image run %d at %#x is not page aligned: %w", runs, off, ErrCorruption)
		case off < next:
			return st, fmt.Errorf("meganode: image run %d at %#x starts before the end %#x of the previous run: %w", runs, off, next, ErrCorruption)
		case off > size || length > size-off:
			return st, fmt.Errorf("meganode: image run %d [%#x, +%#x) ends past the region's %#x bytes: %w", runs, off, length, size, ErrCorruption)
		}
		data := mem[off : off+length]
		if err := readFull(r, data); err != nil {
			return st, fmt.Errorf("meganode: image run %d [%#x, +%#x): %w", runs, off, length, err)
		}
		if got, want := le.Uint32(frame[runOffCRC:]), frameCRC(frame[:runOffCRC], data); got != want {
			return st, fmt.Errorf("meganode: image run %d [%#x, +%#x): CRC %#08x, computed %#08x: %w", runs, off, length, got, want, ErrCorruption)
		}
		runs++
		next = off + length
		st.Pages += length / imagePageSize
		st.Bytes += runFrameSize + length
	}
}

// readFull reads len(b) bytes of an image. Running out of them is a
// truncated image: the error wraps io.ErrUnexpectedEOF and ErrCorruption.
// Other errors are r's.
func readFull(r io.Reader, b []byte) error {
	_, err := io.ReadFull(r, b)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("truncated: %w: %w", io.ErrUnexpectedEOF, ErrCorruption)
	}
	return err
}

// openRestored checks a region restored from an image whose header is h
// (mem is the region, h.Size bytes): its region header must be valid and
// agree with h, and its allocator state consistent (openImage). Errors
// wrap ErrCorruption.
func openRestored(mem []byte, h header) (*Extents, error) {
	rh, err := decodeHeader(mem)
	if err != nil {
		return nil, err
	}
	if rh.Layout != h.Layout || rh.ID != h.ID {
		return nil, fmt.Errorf("meganode: region header of region %d with layout %s in an image of region %d with layout %s: %w",
			rh.ID, layoutInputs(rh.Layout), h.ID, layoutInputs(h.Layout), ErrCorruption)
	}
	ext, err := openExtentsWith(mem, rh)
	if err == nil && rh.version == formatVersion1 {
		// An image of an older server: the region is rewritten in this
		// version (applied index 0 until the caller sets it), as a
		// region made here from its log would be.
		rh.version = formatVersion
		rh.store(mem)
	}
	return ext, err
}
