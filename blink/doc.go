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
//   - Delete removes the entry from its leaf; nodes are never merged.
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
// Mutators (Put, InsertChild, Delete) serialise on the tree's internal lock;
// in Cell the raft apply loop of the region is the only caller. Readers
// (Get, Search, Contains, Iter, Scan) never take it.
//
// Every change the writer makes to a node is published with the odd/even
// version protocol of DESIGN §3 using atomic stores: head and tail versions
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
// # Full meganodes and limits
//
// An insert of a new key returns ErrNeedsSplit, without changing anything,
// once the nodes in use plus a worst-case cascade (height+1 nodes) would
// pass Options.FillThreshold of the meganode's capacity: the meganode split
// of the paper is done by the layer above. Keys are 1..NodeSize/8 bytes,
// values at most Options.MaxValueSize; both are typed errors, never
// truncation.
//
// # Checking
//
// Check verifies every structural invariant and reports each violation
// with the node's pointer and path; tests run it in cleanup.
package blink
