// Package meganode manages Cell's memory on one server: regions (one file
// each, mapped into memory), the meganodes in them, and the buddy allocator
// of their extent areas (docs/design.md §2, paper §2.2 and §3).
//
// # Regions and backing
//
// A region is one file mapped MAP_SHARED, read-write, and identified by a
// cluster-unique 24-bit ID; pointers into it are blink.Ptr values
// (regionID<<40 | offset), never host addresses. Create picks the file's
// backing by Options.Hugepages:
//
//   - a hugetlbfs mount (from /proc/mounts) when it has enough free,
//     unreserved huge pages (/proc/meminfo, or sysfs for a non-default
//     page size): the paper runs its node and extent pools on huge pages
//     to spare the TLB. The file and mapping are rounded up to the huge
//     page size; the kernel reserves the pages at mmap, so a short host
//     fails Create instead of faulting later;
//   - else a file in /dev/shm (tmpfs) advised MADV_HUGEPAGE: transparent
//     huge pages where the kernel's shmem THP setting allows them;
//   - else a plain file in Options.Dir.
//
// HugepagesOn accepts only the first and fails with ErrNoHugepages;
// HugepagesOff uses only the last (tests, or hosts short of memory);
// HugepagesAuto, the default, falls back in that order, and only when a
// backing is absent or unusable. Region.Backing reports what was used and
// Create logs it. Files are created exclusively (never overwritten), sparse
// (memory is taken as pages are first written; Options.Prefault commits
// their blocks with fallocate where the file system supports it), and
// locked with flock while a Region has them open. Region.Path names the
// file, so that a same-host reader can map it read-only.
//
// # Layout
//
// format.go draws the layout and fixes its constants; in short:
//
//	[header 4 KiB][meganode slot 0][slot 1]...[control bytes][extent heap]
//
// The header starts with the root-pointer word (docs/design.md §4: the root
// meganode's pointer lives in the region table and at offset 0 of the
// region that holds the root), then the
// magic, format version, region ID, sizes, the node and extent area
// offsets and sizes, a CRC-32C of those static fields, the allocator's free
// list heads, the applied index (Region.SetApplied: the raft log index of
// the last record applied, so that an image says where it is in the log)
// and a bitmap of the meganode slots in use. Slots are whole
// meganodes aligned to the node size; the node area starts on a 4 KiB (and
// node size) boundary. The layout is a pure function of the region size,
// meganode size, node size, atom size and slot count, recorded in the
// header and recomputed and compared on open: replicas configured alike
// have the same layout whatever backing each host picked, which raft's
// deterministic replay of allocations requires.
//
// # Meganodes
//
// Region.NewMeganode takes the lowest free slot (deterministic), formats a
// blink tree in it with blink.Format and marks the slot in use; a full
// region returns ErrRegionFull. OpenMeganode opens a slot's tree with
// blink.Open; FreeMeganode marks the slot free (its memory and the extents
// its leaves point to are the caller's to deal with first). A Region keeps
// the *Meganode it handed out per slot and returns it again, so that one
// process never has two trees, hence two writer locks, over one meganode.
//
// # Extent allocator
//
// Extents is SQLite's mem5 design over the extent area: the heap is split
// into atoms (Options.AtomSize, default 64 bytes); every block is 2^k atoms,
// aligned to its own size, so its buddy is found by flipping bit k of its
// atom index. One control byte per atom, at the start of the extent area,
// marks block heads with their size class and a free bit (atoms inside a
// block have a zero control byte). Each size class has a doubly linked free
// list threaded through the free blocks' first two words, with its head in
// the region header. Alloc(n) takes the smallest class with a free block,
// splits it down keeping the lower half and freeing the upper halves, and
// returns the most recently freed block of a class first. Free merges the
// block with its buddy for as long as the buddy is a free block of the same
// size. The heap need not be a power of two: it starts as the largest
// aligned blocks that fit, lowest address first, and freeing everything
// restores exactly that state. The largest block is the largest power of
// two atoms in the heap (2 MiB, enough for a 1 MiB value and a 136-byte key,
// needs a heap of at least 2 MiB); larger requests fail with an error
// wrapping blink.ErrExtentsFull, and so does a request no free block can
// hold. A failed Alloc changes nothing.
//
// Allocation is deterministic: the same sequence of Alloc and Free calls on
// the same image returns the same offsets, on every replica and across a
// reopen, because every input of a decision (control bytes, list order)
// lives in the image. The Go-side counters (Stats: bytes and blocks in use,
// free blocks per class, largest free block, fragmentation) are recomputed
// from the control bytes on open, after Check has validated every control
// byte and free list (ErrCorruption on any inconsistency). A Free that does
// not match an allocated block is refused and counted (ExtentStats.BadFrees;
// FreeChecked returns ErrBadFree), and panics in builds with the
// invariants tag.
//
// A region made with Options.SizeClasses (region format 3) serves extents
// of up to 2 KiB from slabs instead (slab.go): buddy blocks cut into slots
// of one of 80 size classes (every 8 bytes up to 512, then at most 12.5%
// apart), with a bitmap of slots in use and partial and full lists per
// class, all in region memory (the lists' heads in a slab directory taken
// from the heap at format time, its offset in the header), so allocation
// stays deterministic and the image self-describing. A slab whose last
// slot is freed goes back to the buddy allocator. Regions made without
// keep buddy blocks only, byte for byte as before.
//
// # Concurrency
//
// Region and Extents are safe for concurrent use. Extents serialises its
// callers (the meganodes of a region share it) on one mutex; Region's mutex
// guards slot allocation. Locking order: Region.mu < Extents.mu < a blink
// tree's writer lock.
//
// Region memory is read concurrently by lock-free local readers and by
// one-sided readers (a remote provider's copy, or another process mapping
// the file), always with 8-byte atomic loads. So every store this package
// makes into region memory is an 8-byte atomic store (internal/atomicmem):
// the header words, the slot bitmap, the free list links written into
// freed blocks that a reader holding a stale extent pointer may be reading
// (the extent CRC tells it the record changed), and control bytes, which
// are updated by storing their whole word. Only the writer that holds the
// relevant mutex reads that state with plain loads.
//
// Close unmaps the region: the caller must first stop all use of its
// meganode trees, extents and Bytes, which would fault rather than fail.
// After Close, the Region's and Extents' methods return ErrClosed.
//
// # Images
//
// A region image is what raft ships as the region's snapshot (image.go
// draws the format): a 48-byte header with the region's ID and layout
// inputs, then runs of consecutive non-zero 4 KiB pages (each framed with
// its offset, length and a CRC-32C, at most 1 MiB), then an end run with a
// trailer counting runs and bytes. Region.WriteImage writes one; the
// caller excludes writers (the apply lock), readers may run on.
// Region.Capture takes the image's moment instead (writers excluded for
// that call only) and Capture.WriteImage writes it while writers go on:
// every store into the region is announced first, and the first store
// into a page the capture has not written yet saves the page for it
// (capture.go). Either reads only what may hold data: on tmpfs and plain
// files it asks lseek (SEEK_DATA, SEEK_HOLE) for the file's data ranges,
// so a mostly empty 1 GiB region is imaged without faulting its holes in
// (with read-ahead off on a plain file's mapping meanwhile); hugetlbfs has
// no such answer and is read whole. All-zero pages are left out. RestoreImage creates a
// region file as Create does (opts pick the backing and name; the layout
// comes from the image and must agree with the sizes opts set, and the ID
// must be opts.ID, else ErrImageMismatch), writes the runs into it, and
// validates it as Open does. The result equals the imaged region byte for
// byte, so it allocates exactly as the original would next. A truncated
// or damaged image fails with ErrCorruption and leaves no file. Decoding
// checks every frame against the region before using it and is fuzzed.
//
// # What survives a reopen
//
// Everything is in the file: the header (layout, root pointer, slot
// bitmap, free list heads), every meganode's nodes, the extent control
// bytes and free lists, and the extents themselves. Open validates the
// header and the whole allocator state, then resumes exactly where the
// region was left. A region in /dev/shm or hugetlbfs survives the process
// but not a reboot; a plain file survives a reboot once Region.Sync
// returned. Durability proper is the raft log's job (wal/): a region image
// is a snapshot, not a log. Not kept across a reopen: the ExtentStats
// BadFrees counter, and the *Meganode handles (reopen them by slot).
package meganode
