package main

import (
	"strings"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// A synthetic cluster of two servers with 4 KiB meganodes: s1 hosts
// region 1 (the root R and the leaf meganodes A and C), s2 region 2 (the
// leaf meganode B).
//
//	level 1:  R [-inf, +inf)
//	level 0:  A [-inf, g) -> B [g, p) -> C [p, +inf)
var (
	ptrR = blink.MakePtr(1, 0x1000)
	ptrA = blink.MakePtr(1, 0x2000)
	ptrB = blink.MakePtr(2, 0x1000)
	ptrC = blink.MakePtr(1, 0x3000)
	ptrY = blink.MakePtr(1, 0x4000) // a split target, in some cases
)

func mega(p blink.Ptr, level uint16, min, max string, right blink.Ptr) wire.MeganodeStats {
	r := wire.KeyRange{Min: []byte(min), Max: []byte(max), MinInf: min == "", MaxInf: max == ""}
	if r.MinInf {
		r.Min = nil
	}
	if r.MaxInf {
		r.Max = nil
	}
	return wire.MeganodeStats{Meganode: wire.Meganode{Ptr: p, Level: level, Height: 2, Range: r}, UsedNodes: 2, Capacity: 4, Right: right}
}

// goodCluster returns a fresh sound view; the meganodes of s1 are
// Servers[0].Meta.Meganodes: R, A, C in that order.
func goodCluster() clusterView {
	return clusterView{
		Root:    ptrR,
		Members: []regiontable.Member{{ID: "s1"}, {ID: "s2"}},
		Regions: []regiontable.Region{{ID: 1, Host: "s1"}, {ID: 2, Host: "s2"}},
		Servers: []serverView{
			{ID: "s1", Meta: &wire.MetadataReply{Server: "s1", MeganodeSize: 0x1000, Root: ptrR, Meganodes: []wire.MeganodeStats{
				mega(ptrR, 1, "", "", 0),
				mega(ptrA, 0, "", "g", ptrB+0x400), // a node of B, not its header
				mega(ptrC, 0, "p", "", 0),
			}}},
			{ID: "s2", Meta: &wire.MetadataReply{Server: "s2", MeganodeSize: 0x1000, Root: ptrR, Meganodes: []wire.MeganodeStats{
				mega(ptrB, 0, "g", "p", ptrC+0x800),
			}}},
		},
	}
}

func TestCheckCluster(t *testing.T) {
	s1 := func(v *clusterView) []wire.MeganodeStats { return v.Servers[0].Meta.Meganodes }
	for _, tc := range []struct {
		name string
		edit func(v *clusterView)
		want []string // one substring per violation, in order
	}{
		{"good tree", func(*clusterView) {}, nil},
		{"gap", func(v *clusterView) {
			v.Servers[1].Meta.Meganodes[0] = mega(ptrB, 0, "h", "p", ptrC)
		}, []string{
			`level 0: gap between meganode 1:0x2000 [-inf, "g") and meganode 2:0x1000 ["h", "p")`,
			`meganode 1:0x2000 [-inf, "g") links right to 2:0x1400, into meganode 2:0x1000 ["h", "p"), whose min is not its max`,
		}},
		{"overlap", func(v *clusterView) {
			v.Servers[1].Meta.Meganodes[0] = mega(ptrB, 0, "f", "p", ptrC)
		}, []string{
			`level 0: meganode 1:0x2000 [-inf, "g") overlaps meganode 2:0x1000 ["f", "p")`,
			`whose min is not its max`,
		}},
		{"two at -inf", func(v *clusterView) {
			v.Servers[1].Meta.Meganodes[0] = mega(ptrB, 0, "", "p", ptrC)
		}, []string{
			`level 0: meganode 1:0x2000 [-inf, "g") overlaps meganode 2:0x1000 [-inf, "p")`,
			`whose min is not its max`,
		}},
		{"gap at the ends", func(v *clusterView) {
			s1(v)[1] = mega(ptrA, 0, "a", "g", ptrB)
			s1(v)[2] = mega(ptrC, 0, "p", "z", ptrA)
		}, []string{
			`level 0: gap from -inf to meganode 1:0x2000 ["a", "g")`,
			`level 0: gap from meganode 1:0x3000 ["p", "z") to +inf`,
			`meganode 1:0x3000 ["p", "z") links right to 1:0x2000, into meganode 1:0x2000 ["a", "g"), whose min is not its max`,
		}},
		{"right link to the wrong meganode", func(v *clusterView) {
			s1(v)[1].Right = ptrC + 0x10
		}, []string{`meganode 1:0x2000 [-inf, "g") links right to 1:0x3010, into meganode 1:0x3000 ["p", +inf), whose min is not its max`}},
		{"right link just past a meganode", func(v *clusterView) {
			s1(v)[1].Right = ptrB + 0x1000
		}, []string{`meganode 1:0x2000 [-inf, "g") links right to 2:0x2000, in no meganode reported`}},
		{"right link to another level", func(v *clusterView) {
			s1(v)[1].Right = ptrR
		}, []string{`meganode 1:0x2000 [-inf, "g") at level 0 links right to 1:0x1000, into meganode 1:0x1000 [-inf, +inf) at level 1`}},
		{"missing and extra right links", func(v *clusterView) {
			s1(v)[1].Right = 0
			s1(v)[2].Right = ptrA
		}, []string{
			`meganode 1:0x2000 [-inf, "g") has no right link`,
			`meganode 1:0x3000 ["p", +inf) ends at +inf but links right to 1:0x2000`,
		}},
		{"wrong root in the table", func(v *clusterView) {
			v.Root = ptrA
			for i := range v.Servers {
				v.Servers[i].Meta.Root = ptrA
			}
		}, []string{`the top level's meganode is 1:0x1000, but the region table's root is 1:0x2000`}},
		{"a server with a stale root", func(v *clusterView) {
			v.Servers[1].Meta.Root = ptrB
		}, []string{`server s2 takes the root to be 2:0x1000, the region table says 1:0x1000`}},
		{"no root in the table", func(v *clusterView) {
			v.Root = 0
			for i := range v.Servers {
				v.Servers[i].Meta.Root = 0
			}
		}, []string{`the top level's meganode is 1:0x1000, but the region table's root is nil`, `the region table has no root`}},
		{"top level of two", func(v *clusterView) {
			s1(v)[0] = mega(ptrR, 1, "", "m", ptrY)
			v.Servers[0].Meta.Meganodes = append(s1(v), mega(ptrY, 1, "m", "", 0))
		}, []string{`top level 1 holds 2 meganodes, not one root`}},
		{"empty level", func(v *clusterView) {
			v.Servers[0].Meta.Meganodes = []wire.MeganodeStats{mega(ptrR, 1, "", "", 0)}
			v.Servers[1].Meta.Meganodes = nil
		}, []string{`level 0: no meganode`}},
		{"split before its link", func(v *clusterView) {
			s1(v)[1].SplitSource = true
			v.Servers[0].Meta.Meganodes = append(s1(v), withSplit(mega(ptrY, 0, "d", "g", ptrB), false, true))
		}, nil},
		{"split after its link", func(v *clusterView) {
			s1(v)[1] = withSplit(mega(ptrA, 0, "", "d", ptrY+0x400), true, false)
			s1(v)[1].SplitLinked = true
			v.Servers[0].Meta.Meganodes = append(s1(v), withSplit(mega(ptrY, 0, "d", "g", ptrB), false, true))
		}, nil},
		{"split thawed on one side", func(v *clusterView) {
			s1(v)[1] = mega(ptrA, 0, "", "d", ptrY+0x400)
			v.Servers[0].Meta.Meganodes = append(s1(v), withSplit(mega(ptrY, 0, "d", "g", ptrB), false, true))
		}, nil},
		{"split of the rightmost meganode after its link", func(v *clusterView) {
			s1(v)[2] = withSplit(mega(ptrC, 0, "p", "t", ptrY), true, false)
			s1(v)[2].SplitLinked = true
			v.Servers[0].Meta.Meganodes = append(s1(v), withSplit(mega(ptrY, 0, "t", "", 0), false, true))
		}, nil},
		{"split target that does not fill the gap", func(v *clusterView) {
			s1(v)[1] = withSplit(mega(ptrA, 0, "", "d", ptrY), true, false)
			v.Servers[0].Meta.Meganodes = append(s1(v), withSplit(mega(ptrY, 0, "e", "g", ptrB), false, true))
		}, []string{
			`level 0: gap between meganode 1:0x2000 [-inf, "d") and meganode 2:0x1000 ["g", "p")`,
			`meganode 1:0x2000 [-inf, "d") links right to 1:0x4000, into meganode 1:0x4000 ["e", "g"), whose min is not its max`,
		}},
		{"region not in the table", func(v *clusterView) {
			v.Regions = v.Regions[:1]
		}, []string{`meganode 2:0x1000 ["g", "p") (server s2): region 2 is not in the region table`}},
		{"region of a dead host", func(v *clusterView) {
			v.Members = v.Members[:1]
		}, []string{`meganode 2:0x1000 ["g", "p"): region 2 is hosted by s2, not a live member`}},
		{"region reported by another server", func(v *clusterView) {
			v.Regions[1].Host = "s1"
		}, []string{`meganode 2:0x1000 ["g", "p") is reported by server s2, but region 2 is hosted by s1`}},
		{"meganode reported twice", func(v *clusterView) {
			v.Servers[1].Meta.Meganodes = append(v.Servers[1].Meta.Meganodes, s1(v)[2])
		}, []string{
			`meganode 1:0x3000 ["p", +inf) is reported by server s1 and by server s2`,
		}},
		{"meganode sizes differ", func(v *clusterView) {
			v.Servers[1].Meta.MeganodeSize = 0x2000
		}, []string{`server s2 has 8KiB meganodes, others 4KiB`}},
		{"nothing reported", func(v *clusterView) {
			v.Servers = nil
		}, []string{`no server reported a meganode`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := goodCluster()
			tc.edit(&v)
			got := checkCluster(v)
			ok := len(got) == len(tc.want)
			for i := 0; ok && i < len(got); i++ {
				ok = strings.Contains(got[i], tc.want[i])
			}
			if !ok {
				t.Errorf("violations:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

func withSplit(m wire.MeganodeStats, source, target bool) wire.MeganodeStats {
	m.SplitSource, m.SplitTarget = source, target
	return m
}

// confirmed keeps the violations seen again in a later snapshot.
func TestConfirmViolations(t *testing.T) {
	got := confirm([]string{"a", "b", "c"}, []string{"c", "x", "a"})
	if strings.Join(got, ",") != "a,c" {
		t.Errorf("confirm = %q", got)
	}
	if confirm([]string{"a"}, nil) != nil {
		t.Error("confirm of a clean snapshot")
	}
}
