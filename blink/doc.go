// Package blink is the B-link tree inside one Cell meganode: the fixed-size
// node format, Sagiv's algorithms over a byte arena, and the validated node
// copy that every lock-free reader (server-side search and one-sided reads
// alike) uses. It knows nothing of the network, raft, etcd or clocks.
//
// # Memory
//
// A Tree lives in the memory of one region (a []byte, normally a shared
// mapping; see package meganode) at a node-aligned base offset: node 0 is the
// meganode header, the others are tree nodes or free. Nodes point to each
// other with Ptr (regionID<<40 | offset), never Go pointers, so one-sided
// readers on other machines follow the same pointers. Key-value records
// (extents) live in the same region's extent area, allocated through the
// Extents interface. The byte layout is drawn in format.go.
//
// # Algorithms (paper §2.2, Sagiv 1986)
//
//   - Search is lock-free: descend from the local root choosing the child
//     whose range covers the key, and follow right links while the key is at
//     or above a node's max key.
//   - Insert finds the leaf, and when the entry does not fit, splits it: the
//     upper half is written into a new right sibling first, then the left
//     half is published with its max lowered to the separator and its right
//     link pointing to the sibling. Readers between the two steps reach the
//     sibling by the right link. The separator is then inserted into the
//     parent as a separate (decoupled) insert, which may split in turn; a
//     split of the local root grows a new root and the height by one.
//   - Delete removes the entry from its leaf. A leaf left with entries
//     under a quarter of a node (or none) merges with a neighbour under
//     the same parent when both fit in three quarters of a node: the left
//     one takes the right one's entries (words unchanged; a legacy leaf
//     merged in versioned mode is written versioned), max and right link,
//     then the parent drops the right one's entry, then the right one is
//     freed (valid flag cleared, version raised) onto the free list for
//     later inserts to reuse. Parents merge the same way up to the level
//     below the root (merge.go). Readers reaching the freed node through
//     a stale pointer find it invalid, or reused with a higher version
//     and a range that covers their key only if it is the right node, and
//     restart as they do for nodes freed by a meganode split. During a
//     meganode split only nodes whose range ends at or below the split
//     key merge.
//   - Iteration copies one leaf at a time, moving forward by right links and
//     backward by descending again to the leaf just below the current one.
//
// Every node keeps a min and max key (paper §2.3: "We also store a min key to
// cope with concurrent RDMA reads"), a valid flag, and head and tail
// versions.
//
// # Concurrency contract
//
// One writer per meganode at a time, any number of lock-free readers.
// Mutators (Put, PutWord, PutPlaceholder, SetWord, SetVersioning,
// InsertChild, Delete, and the split steps) serialise on the tree's
// internal lock;
// in Cell the raft apply loop of the region is the only caller. Readers
// (Get, GetWord, Search, Contains, Iter, Scan, ScanWords) never take it.
//
// Every change the writer makes to a node is published with the odd/even
// version protocol of docs/design.md §3 using atomic stores: head and tail versions
// to the same odd value, the changed body words, then tail and head to the
// next even value. The writer builds each new node image in private scratch
// memory and stores only the words that differ. Readers copy a node with
// 8-byte atomic loads in increasing address order (CopyNode) and accept the
// copy only when head == tail, even, the node is valid, and (CopyNodeFor)
// the searched key is in [min, max). A torn copy is retried; an invalid node
// or a key below the node's min (the node was freed and reused for another
// range) restarts the search from the root; a key at or above the max means
// "follow the right link". Records are written before the leaf entry that
// points to them is published, freed only after it is unpublished, and
// carry a CRC-64 in the leaf entry, so a reader that copies a record being
// reused detects it and searches again. Every retry is counted by cause in
// Tree.Stats.
//
// Versions only grow, also across free and reuse, so a reader holding a
// stale pointer can never mistake a reincarnated node for the one it meant
// to read unless that node covers its key, in which case it is the right
// node to read (paper §2.4).
//
// # Entry words (docs/transactions.md §2)
//
// A meganode is in legacy mode (every image written before versions, and
// every meganode formatted without Config.Versioned) or in versioned mode
// with a legacy version U (Config.Versioned, or SetVersioning later), kept
// in its header. In versioned mode every leaf entry of a leaf meganode has
// an entry word (Word: a 62-bit version, locked, placeholder), stored after
// the entry's extent payload in a versioned leaf (flagVersioned, format.go),
// so a validated leaf copy holds the words of all its keys. Leaves written
// in legacy mode stay legacy, their entries reading as MakeWord(U), until a
// write changes them: the write first rewrites the leaf versioned with
// exactly those words, splitting it like an insert when the longer entries
// no longer fit (that alone never needs the fill threshold's room: an
// existing key's write returns ErrNeedsSplit only in a meganode with no
// node left). Writes in versioned mode carry words (PutWord, SetWord,
// PutPlaceholder; Put returns ErrNeedsWord); Delete works in both modes.
// A placeholder is an entry without a record, the lock of an absent key:
// it takes room like any entry and moves with splits, and Get, Contains,
// Iter and Scan do not see it (Search reports its word with Found false).
// Every change to a word is a change of the leaf, published with the
// version protocol below, so (leaf, version) names one content of the leaf
// with its words. Every copy of an entry (splits, CopyRight, FrozenEntries,
// FrozenRecords and AppendEntries) carries its word unchanged. Pointer
// nodes never carry words.
//
// # Full meganodes and limits
//
// An insert of a new key returns ErrNeedsSplit, without changing anything,
// once the nodes in use plus a worst-case cascade (height+1 nodes) would
// pass Options.FillThreshold of the meganode's capacity: the layer above
// then splits the meganode (below). Keys are 1..NodeSize/8 bytes, values
// at most Options.MaxValueSize; both are typed errors, never truncation.
//
// # Meganode split (paper §2.2, §2.4)
//
// Meganodes are level-linked like nodes: the rightmost node of every local
// level links to the same place, the meganode's right link (Tree.Right): a
// node of the next meganode of the same global level, or nil. A split of
// meganode X into X (left) and a new meganode Y (right) is a sequence of
// steps (split.go), each under X's or Y's writer lock for a bounded time,
// never both:
//
//  1. Choose (SplitKey): sep is the middle entry key, by position, of the
//     highest local level with at least 256 entries (close to half of the
//     leaves on each side), or, if the boundary there could not be
//     published, the middle entry key of the topmost node with two entries
//     or more (the paper's choice). An inner entry key is a node boundary
//     at every level below it, so X_right = [sep, X.max) is a set of whole
//     leaves.
//  2. Freeze (Freeze): Put, Delete and InsertChild of keys >= sep return
//     ErrFrozen; writes below sep go on (they only make nodes whose max is
//     at most sep, so the leaf boundary at sep stays); reads never block.
//  3. Copy (BeginCopy, then CopyRight or FrozenEntries + AppendEntries in
//     batches): Y, formatted with bounds [sep, X.max) at X's global level,
//     takes X's right link as its own and the leaf entries of X_right in
//     key order, filling its nodes (pack: an append that does not fit in
//     the rightmost node moves as few entries as fit to a new node). A
//     leaf meganode in the same region shares the records: Y's entries
//     hold X's extent pointers, lengths and CRCs. Y is frozen whole and
//     unreachable.
//  4. Link (LinkRight): at every level, top down, the node of X whose range
//     ends at sep gets Y's local root as its right link; a node that
//     straddles sep (only above the level where sep is an entry key) is
//     truncated to its entries below sep, with max sep and the same right
//     link; X's header max becomes sep. Each node is published with the
//     version protocol. From here a search for a key >= sep in X meets
//     max <= key and follows the right link into Y (AboveMax), whatever
//     mix of old and new nodes it sees: the old X_right nodes stay valid,
//     frozen, and hold the same entries as Y. This is the point of no
//     return; before it, Thaw on X and discarding Y undo the split.
//  5. Invalidate (FreeRight in batches, then Thaw on X and Y): the detached
//     X_right nodes are freed (valid flag cleared, versions growing) onto
//     X's free list, to be reused by X's left half. The shared records now
//     belong to Y and are not freed. Y stays frozen until every old node
//     is invalid: a lock-free reader that copied an old X_right leaf and
//     then its record checks the leaf's version afterwards, so the record
//     must not be reused while the leaf is still valid.
//
// Inserting sep into the parent meganode (or growing a new root meganode)
// is the layer above's decoupled insert; until then readers reach Y through
// X's right links.
//
// Readers stay correct throughout (paper §2.4). A reader of a key >= sep
// either reads old X_right nodes, valid and unchanged, or is sent right to
// Y. One that meets an invalid node restarts from X's root, which sends it
// to Y. One holding a stale pointer to an X_right node that was freed and
// reused by X's left half finds a node whose max is at most sep <= key:
// it moves right along that level and reaches Y through the boundary, or
// finds the key below the node's min and restarts; a reused node never
// covers a key >= sep. Iterators resume from the leaf max where they left
// the meganode (Iter.Edge), never from the header's bounds, and a backward
// positioning below a key past the meganode's current range continues in
// the meganode to the right.
//
// Check accounts for a split in progress (detached nodes not yet freed);
// CheckLinks verifies two neighbouring meganodes: X.max == sep == Y.min,
// equal global levels, and X's right link on Y's leftmost spine (Y's local
// root when the split published it).
//
// # Checking
//
// Check verifies every structural invariant and reports each violation
// with the node's pointer and path; tests run it in cleanup.
package blink
