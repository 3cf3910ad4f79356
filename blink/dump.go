package blink

import (
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Dumps of nodes for people: tests, `cellctl dump`, debugging.

// DescribeNode returns a one-node summary of b (a node's bytes): kind,
// versions, flags, bounds, right link and entries. It never panics.
func DescribeNode(b []byte) string {
	n := node(b)
	if len(n) < MinNodeSize || len(n) > MaxNodeSize || len(n)%8 != 0 {
		return fmt.Sprintf("not a node: %d bytes", len(n))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "versions %d/%d ", n.headVersion(), n.tailVersion())
	switch n.kind() {
	case kindHeader:
		if len(n) < hdrKeys+2*MaxKeySize(len(n)) {
			return sb.String() + "header (truncated)"
		}
		ml, xl := n.u16(hdrMinLen), n.u16(hdrMaxLen)
		mk := MaxKeySize(len(n))
		if ml > mk || xl > mk {
			return sb.String() + "header with bad key lengths"
		}
		fmt.Fprintf(&sb, "meganode header: level %d height %d root %v capacity %d fresh %d free %d (head %v) size %d range [%s, %s)",
			n.u16(hdrGlobalLevel), n.u16(hdrHeight), Ptr(n.u64(hdrRoot)), le.Uint32(n[hdrCapacity:]),
			le.Uint32(n[hdrNextFresh:]), le.Uint32(n[hdrFreeCount:]), Ptr(n.u64(hdrFreeHead)), n.u64(hdrSize),
			fmtBound(n[hdrKeys:hdrKeys+ml], n.flags()&flagMinInf != 0, "-inf"),
			fmtBound(n[hdrKeys+mk:hdrKeys+mk+xl], n.flags()&flagMaxInf != 0, "+inf"))
		if n.flags()&flagVersioned != 0 {
			fmt.Fprintf(&sb, " versioned (legacy version %d)", n.u64(len(n)-hdrLegacyFromEnd))
		}
		return sb.String()
	case kindFree:
		fmt.Fprintf(&sb, "free node, next free %v", n.rightLink())
		return sb.String()
	case kindTree:
	default:
		fmt.Fprintf(&sb, "unknown kind %d", n.kind())
		return sb.String()
	}
	if !wellFormed(n) {
		fmt.Fprintf(&sb, "tree node that does not decode (count %d heapLo %d)", n.count(), n.heapLo())
		return sb.String()
	}
	fmt.Fprintf(&sb, "%s level %d valid %v count %d range [%s, %s) right %v free %d",
		map[bool]string{true: "leaf", false: "inner"}[n.level() == 0], n.level(), n.valid(), n.count(),
		fmtBound(n.minKey(), n.minInf(), "-inf"), fmtBound(n.maxKey(), n.maxInf(), "+inf"), n.rightLink(), n.free())
	for i := 0; i < n.count(); i++ {
		fmt.Fprintf(&sb, "\n  [%d] %q -> %s", i, n.key(i), n.describePayload(i))
	}
	return sb.String()
}

func (n node) describePayload(i int) string {
	if n.extents() {
		p, l, crc := n.extent(i)
		if n.versioned() {
			if w := n.rawWord(i); w.Placeholder() {
				return fmt.Sprintf("placeholder word %v", w)
			}
			return fmt.Sprintf("extent %v len %d crc %#016x word %v", p, l, crc, n.rawWord(i))
		}
		return fmt.Sprintf("extent %v len %d crc %#016x", p, l, crc)
	}
	return fmt.Sprintf("child %v", n.child(i))
}

func fmtBound(k []byte, inf bool, infName string) string {
	if inf {
		return infName
	}
	return fmt.Sprintf("%q", k)
}

// AnnotatedHex returns a hex dump of a tree node with every field named, the
// format pinned by the golden tests. It never panics; bytes that do not
// decode are dumped raw.
func AnnotatedHex(b []byte) string {
	n := node(b)
	var sb strings.Builder
	line := func(off, ln int, what string) {
		fmt.Fprintf(&sb, "%04x  %-48s %s\n", off, spacedHex(n[off:off+ln]), what)
	}
	if len(n) < MinNodeSize || n.kind() != kindTree || !wellFormed(n) {
		sb.WriteString(hex.Dump(b))
		return sb.String()
	}
	line(offHeadVersion, 8, fmt.Sprintf("head version %d", n.headVersion()))
	line(offFlags, 1, fmt.Sprintf("flags %s", flagNames(n.flags())))
	line(offLevel, 1, fmt.Sprintf("level %d", n.level()))
	line(offCount, 2, fmt.Sprintf("count %d", n.count()))
	line(offMinOff, 4, fmt.Sprintf("min key at %d, %d bytes", n.u16(offMinOff), n.u16(offMinLen)))
	line(offMaxOff, 4, fmt.Sprintf("max key at %d, %d bytes", n.u16(offMaxOff), n.u16(offMaxLen)))
	line(offHeapLo, 2, fmt.Sprintf("heap low %d", n.heapLo()))
	line(offKind, 2, fmt.Sprintf("kind %d", n.kind()))
	line(offRightLink, 8, fmt.Sprintf("right link %v", n.rightLink()))
	for i := 0; i < n.count(); i++ {
		line(offSlots+slotSize*i, slotSize, fmt.Sprintf("slot %d -> %d", i, n.slot(i)))
	}
	// The heap, in address order: entries and bounds.
	type item struct {
		off, ln int
		what    string
	}
	var items []item
	for i := 0; i < n.count(); i++ {
		o := n.slot(i)
		kl := n.u16(o)
		items = append(items, item{o, keyLenSize + kl, fmt.Sprintf("entry %d key %q", i, n.key(i))})
		if pl := o + keyLenSize + kl; n.versioned() {
			p, l, crc := n.extent(i)
			items = append(items, item{pl, extentPayload, fmt.Sprintf("entry %d extent %v len %d crc %#016x", i, p, l, crc)},
				item{pl + extentPayload, versionedPayload - extentPayload, fmt.Sprintf("entry %d word %v", i, n.rawWord(i))})
		} else {
			items = append(items, item{pl, n.payloadSize(), fmt.Sprintf("entry %d %s", i, n.describePayload(i))})
		}
	}
	if l := n.u16(offMinLen); l > 0 {
		items = append(items, item{n.u16(offMinOff), l, fmt.Sprintf("min key %q", n.minKey())})
	}
	if l := n.u16(offMaxLen); l > 0 {
		items = append(items, item{n.u16(offMaxOff), l, fmt.Sprintf("max key %q", n.maxKey())})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].off < items[j].off })
	fmt.Fprintf(&sb, "%04x  ... %d bytes free or garbage\n", offSlots+slotSize*n.count(), n.heapLo()-offSlots-slotSize*n.count())
	for _, it := range items {
		for o := 0; o < it.ln; o += 16 {
			w := min(16, it.ln-o)
			what := it.what
			if o > 0 {
				what = "  (cont.)"
			}
			line(it.off+o, w, what)
		}
	}
	line(len(n)-tailSize, 8, fmt.Sprintf("tail version %d", n.tailVersion()))
	return sb.String()
}

func spacedHex(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%02x", c)
	}
	return sb.String()
}

func flagNames(f byte) string {
	var s []string
	for _, x := range []struct {
		bit  byte
		name string
	}{{flagValid, "valid"}, {flagMinInf, "min-inf"}, {flagMaxInf, "max-inf"}, {flagExtents, "extents"}, {flagVersioned, "versioned"}} {
		if f&x.bit != 0 {
			s = append(s, x.name)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "|")
}

// Dump writes every node of the meganode in tree order (each level left to
// right, from the root down), then the free list, as DescribeNode lines.
// It takes the writer's lock.
func (t *Tree) Dump(w io.Writer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	hp := t.headerPtr()
	if _, err := fmt.Fprintf(w, "%v %s\n", hp, DescribeNode(t.nodeBytes(hp))); err != nil {
		return err
	}
	first := Ptr(t.mu.hdr.u64(hdrRoot))
	for t.local(first) {
		n := t.nodeBytes(first)
		next := Ptr(0)
		if n.level() > 0 && n.count() > 0 {
			next = n.child(0)
		}
		for p := first; t.local(p); p = t.nodeBytes(p).rightLink() {
			if _, err := fmt.Fprintf(w, "%v %s\n", p, DescribeNode(t.nodeBytes(p))); err != nil {
				return err
			}
		}
		if t.nodeBytes(first).level() == 0 {
			break
		}
		first = next
	}
	for p := Ptr(t.mu.hdr.u64(hdrFreeHead)); t.local(p); p = t.nodeBytes(p).rightLink() {
		if _, err := fmt.Fprintf(w, "%v %s\n", p, DescribeNode(t.nodeBytes(p))); err != nil {
			return err
		}
	}
	return nil
}

// NodeBytes copies the node at p (validated or not) for dumps; it returns
// false if p is not a node of this meganode.
func (t *Tree) NodeBytes(p Ptr, dst []byte) bool {
	if !t.local(p) || len(dst) != t.nodeSize {
		return false
	}
	copyNodeRaw(dst, t.nodeBytes(p))
	return true
}
