package main

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// The cluster checks of cellctl check: what no single server can verify,
// checked on the region table and the Metadata replies of every live
// server (a pure function of them, checkCluster).
//
// The rules, for the meganodes all servers report together:
//
//  1. Every meganode is reported once, by the host of its region: the
//     region is in the region table, its host is a live member, and it
//     is the server that reported it. Servers agree on the meganode size.
//  2. Tiling: at every level from 0 to the top, the meganodes sorted by
//     min cover the key space from -inf to +inf, each one's max equal to
//     the next one's min: no gap, no overlap. Split targets in progress
//     (the new meganode of a split, not reachable from its parent yet) are
//     left out, and a gap is tolerated where split targets of the level
//     fill it exactly: between a split's link (the source's max drops to
//     the split key) and its thaw, the source's old right half lives in
//     the target. A split source in progress is otherwise checked as any
//     meganode: its range is consistent before and after its link.
//  3. Right links: a meganode with max +inf has no right link; any other
//     meganode's right link points into the meganode (of the same level,
//     split targets included) whose min equals its max. A pointer p lies
//     in meganode m when it is of m's region and m.Ptr <= p <
//     m.Ptr+MeganodeSize. Split targets are not checked.
//  4. The root: the top level holds one meganode, and it is the root
//     pointer of the region table; every server knows that root.
//
// A split in progress passes through states that break these rules for
// an instant (a root meganode split before the new root is made; a new
// root before the table names it). cellctl check therefore reports only
// the violations it finds again in later snapshots (--attempts).

// clusterView is what the cluster checks look at.
type clusterView struct {
	Root    blink.Ptr // the region table's root pointer
	Members []regiontable.Member
	Regions []regiontable.Region
	Servers []serverView // the servers that answered
}

// serverView is one server's Metadata reply (with its meganodes).
type serverView struct {
	ID   string // the member ID
	Meta *wire.MetadataReply
}

// reported is one meganode as a server reported it.
type reported struct {
	wire.MeganodeStats
	server string
	size   uint64 // the reporting server's meganode size
}

// contains reports whether p points into m.
func (m *reported) contains(p blink.Ptr) bool {
	return p.Region() == m.Ptr.Region() && p >= m.Ptr && uint64(p-m.Ptr) < m.size
}

func (m *reported) String() string {
	return fmt.Sprintf("meganode %v %v", m.Ptr, m.Range)
}

// cmpMin orders key ranges by min, -inf first.
func cmpMin(a, b *wire.KeyRange) int {
	switch {
	case a.MinInf && b.MinInf:
		return 0
	case a.MinInf:
		return -1
	case b.MinInf:
		return 1
	}
	return bytes.Compare(a.Min, b.Min)
}

// cmpMaxMin compares a's max with b's min (+inf above and -inf below
// every key).
func cmpMaxMin(a, b *wire.KeyRange) int {
	switch {
	case a.MaxInf || b.MinInf:
		return 1
	}
	return bytes.Compare(a.Max, b.Min)
}

// boundsMeet reports whether a's max is b's min.
func boundsMeet(a, b *wire.KeyRange) bool {
	return !a.MaxInf && !b.MinInf && bytes.Equal(a.Max, b.Min)
}

// checkCluster returns the violations of the rules above, one line each,
// in a deterministic order.
func checkCluster(v clusterView) []string {
	c := &clusterCheck{v: v, byPtr: map[blink.Ptr]*reported{}}
	c.reports()
	if len(c.all) == 0 {
		c.bad("no server reported a meganode")
		return c.out
	}
	c.sortLevels()
	c.tiling()
	c.rightLinks()
	c.root()
	return c.out
}

// clusterCheck is one run of checkCluster: the meganodes reported, by
// pointer and by level (split targets apart), and the violations found.
type clusterCheck struct {
	v     clusterView
	out   []string
	all   []*reported
	byPtr map[blink.Ptr]*reported
	top   int           // the top level (the root's)
	lvls  [][]*reported // by level, each sorted by min
	tgts  [][]*reported // split targets by level, each sorted by min
}

// bad records a violation.
func (c *clusterCheck) bad(format string, args ...any) {
	c.out = append(c.out, fmt.Sprintf(format, args...))
}

// reports applies rule 1 (who reports what) and gathers the meganodes
// reported.
func (c *clusterCheck) reports() {
	live := map[string]bool{}
	for _, m := range c.v.Members {
		live[m.ID] = true
	}
	regions := map[uint32]regiontable.Region{}
	for _, r := range c.v.Regions {
		regions[r.ID] = r
	}
	var size uint64
	for _, s := range c.v.Servers {
		if s.Meta == nil {
			continue
		}
		if size == 0 {
			size = s.Meta.MeganodeSize
		} else if s.Meta.MeganodeSize != size {
			c.bad("server %s has %s meganodes, others %s", s.ID, fmtBytes(s.Meta.MeganodeSize), fmtBytes(size))
		}
		if s.Meta.Root != c.v.Root {
			c.bad("server %s takes the root to be %v, the region table says %v", s.ID, s.Meta.Root, c.v.Root)
		}
		for _, ms := range s.Meta.Meganodes {
			m := &reported{MeganodeStats: ms, server: s.ID, size: s.Meta.MeganodeSize}
			if prev := c.byPtr[m.Ptr]; prev != nil {
				c.bad("%v is reported by server %s and by server %s", m, prev.server, s.ID)
				continue
			}
			c.byPtr[m.Ptr] = m
			c.all = append(c.all, m)
			r, ok := regions[m.Ptr.Region()]
			switch {
			case !ok:
				c.bad("%v (server %s): region %d is not in the region table", m, s.ID, m.Ptr.Region())
			case !live[r.Host]:
				c.bad("%v: region %d is hosted by %s, not a live member", m, r.ID, r.Host)
			case r.Host != s.ID:
				c.bad("%v is reported by server %s, but region %d is hosted by %s", m, s.ID, r.ID, r.Host)
			}
		}
	}
}

// sortLevels sorts the meganodes into levels, each by min; split targets
// apart.
func (c *clusterCheck) sortLevels() {
	for _, m := range c.all {
		if !m.SplitTarget {
			c.top = max(c.top, int(m.Level))
		}
	}
	c.lvls = make([][]*reported, c.top+1)
	c.tgts = make([][]*reported, c.top+1)
	for _, m := range c.all {
		switch {
		case int(m.Level) > c.top:
			c.bad("%v: split target at level %d, above the top level %d", m, m.Level, c.top)
		case m.SplitTarget:
			c.tgts[m.Level] = append(c.tgts[m.Level], m)
		default:
			c.lvls[m.Level] = append(c.lvls[m.Level], m)
		}
	}
	byMin := func(a, b *reported) int {
		if d := cmpMin(&a.Range, &b.Range); d != 0 {
			return d
		}
		return cmp.Compare(a.Ptr, b.Ptr)
	}
	for lv := range c.lvls {
		slices.SortFunc(c.lvls[lv], byMin)
		slices.SortFunc(c.tgts[lv], byMin)
	}
}

// tiling applies rule 2: each level's meganodes tile the key space (split
// targets may fill a gap).
func (c *clusterCheck) tiling() {
	for lv := c.top; lv >= 0; lv-- {
		l := c.lvls[lv]
		if len(l) == 0 {
			c.bad("level %d: no meganode", lv)
			continue
		}
		if !l[0].Range.MinInf {
			c.bad("level %d: gap from -inf to %v", lv, l[0])
		}
		for i := 1; i < len(l); i++ {
			a, b := l[i-1], l[i]
			switch d := cmpMaxMin(&a.Range, &b.Range); {
			case d > 0:
				c.bad("level %d: %v overlaps %v", lv, a, b)
			case d < 0 && !filled(c.tgts[lv], a.Range.Max, b.Range.Min, false):
				c.bad("level %d: gap between %v and %v", lv, a, b)
			}
		}
		if last := l[len(l)-1]; !last.Range.MaxInf && !filled(c.tgts[lv], last.Range.Max, nil, true) {
			c.bad("level %d: gap from %v to +inf", lv, last)
		}
	}
}

// rightLinks applies rule 3: each meganode links right to the meganode
// of its level whose min is its max.
func (c *clusterCheck) rightLinks() {
	for lv := c.top; lv >= 0; lv-- {
		for _, m := range c.lvls[lv] {
			if m.Range.MaxInf {
				if !m.Right.IsNil() {
					c.bad("%v ends at +inf but links right to %v", m, m.Right)
				}
				continue
			}
			if m.Right.IsNil() {
				c.bad("%v has no right link", m)
				continue
			}
			n := c.containing(m.Right)
			switch {
			case n == nil:
				c.bad("%v links right to %v, in no meganode reported", m, m.Right)
			case n.Level != m.Level:
				c.bad("%v at level %d links right to %v, into %v at level %d", m, m.Level, m.Right, n, n.Level)
			case !boundsMeet(&m.Range, &n.Range):
				c.bad("%v links right to %v, into %v, whose min is not its max", m, m.Right, n)
			}
		}
	}
}

// containing is the reported meganode that holds node p, or nil.
func (c *clusterCheck) containing(p blink.Ptr) *reported {
	for _, m := range c.all {
		if m.contains(p) {
			return m
		}
	}
	return nil
}

// root applies rule 4: the top level is one meganode, the region table's
// root.
func (c *clusterCheck) root() {
	switch l := c.lvls[c.top]; {
	case len(l) != 1:
		c.bad("top level %d holds %d meganodes, not one root", c.top, len(l))
	case l[0].Ptr != c.v.Root:
		c.bad("the top level's meganode is %v, but the region table's root is %v", l[0].Ptr, c.v.Root)
	}
	if c.v.Root.IsNil() {
		c.bad("the region table has no root")
	} else if c.byPtr[c.v.Root] == nil {
		c.bad("the root %v is not a meganode any server reported", c.v.Root)
	}
}

// filled reports whether the split targets ts (sorted by min) cover the
// gap [from, to) exactly, one after the other (toInf: to +inf).
func filled(ts []*reported, from, to []byte, toInf bool) bool {
	cur := from
	for _, t := range ts {
		if t.Range.MinInf || !bytes.Equal(t.Range.Min, cur) {
			continue
		}
		if t.Range.MaxInf {
			return toInf
		}
		if !toInf && bytes.Compare(t.Range.Max, to) > 0 {
			return false
		}
		cur = t.Range.Max
		if !toInf && bytes.Equal(cur, to) {
			return true
		}
	}
	return false
}
