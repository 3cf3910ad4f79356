package server

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cellstore/cell/blink"
)

// Check verifies the server's tree of meganodes at rest (no split in
// progress): every meganode's own invariants (blink's Check); along every
// level, left to right from the leftmost meganode (min -inf), each pair of
// neighbours linked by their right links (blink.CheckLinks); the root alone
// on its level; below it, the entries of each level, in order, naming the
// meganodes of the next level in their order, each entry's key the child's
// min ("\x00" for -inf); and no meganode left out (an orphan). It takes one
// tree's writer lock at a time. Meganodes on other servers are not
// followed: entries and links that lead there are skipped, and then so is
// the orphan check (a meganode here may hang below one elsewhere); the
// cluster-wide links are cellctl check's.
// The error joins one error per violation (errors.Join), each one line
// long. OpCheck runs it while holding s.splitMu (checkop.go), so that no
// split of this server is half done.
func (s *Server) Check() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("server: "+format, args...))
	}
	megas := servedMeganodes(s.servedList())
	for _, lm := range megas {
		for _, v := range lm.t.Check() {
			bad("meganode %v: %v: %w", lm.m.Ptr(), v, blink.ErrCorruption)
		}
	}
	root := s.meganodeAt(s.Root())
	if root == nil || root.m.Ptr() != s.Root() {
		return errors.Join(errs...)
	}
	if r := root.t.Right(); !r.IsNil() {
		bad("root meganode %v has a right neighbour %v: the root did not move up", root.m.Ptr(), r)
	}
	seen := map[*localMeganode]bool{}
	partial := false              // some meganode of the tree is elsewhere
	first, leftmost := root, true // leftmost: first is its level's leftmost
	for range maxHops {
		// The level, left to right.
		var level []*localMeganode
		for lm := first; lm != nil; {
			if seen[lm] {
				bad("meganode %v met twice", lm.m.Ptr())
				break
			}
			seen[lm] = true
			if n := len(level); n > 0 {
				for _, v := range blink.CheckLinks(level[n-1].t, lm.t) {
					bad("%v", v)
				}
			}
			if lm.level != first.level {
				bad("meganode %v at level %d in level %d", lm.m.Ptr(), lm.level, first.level)
			}
			level = append(level, lm)
			next := lm.t.Right()
			if next.IsNil() {
				break
			}
			if lm = s.meganodeAt(next); lm == nil {
				partial = true
				break // on another server
			}
		}
		if h, err := first.t.Header(); leftmost && (err != nil || !h.Bounds.MinInf) {
			bad("leftmost meganode %v of level %d does not start at -inf (%v)", first.m.Ptr(), first.level, err)
		}
		if first.level == 0 {
			break
		}
		// The next level, as the entries of this one name it.
		var children []*localMeganode
		prevLocal := false // the previous entry named a meganode here
		leftmost = true
		for _, lm := range level {
			it := lm.t.NewIter(nil)
			for ok := it.First(); ok; ok = it.Next() {
				if s.servedReplica(it.Child().Region()) == nil {
					partial, prevLocal = true, false
					if len(children) == 0 {
						leftmost = false
					}
					continue
				}
				c := s.meganodeAt(it.Child())
				if c == nil || c.m.Ptr() != it.Child() {
					bad("entry %q of %v names %v, not a meganode of this server", it.Key(), lm.m.Ptr(), it.Child())
					continue
				}
				h, err := c.t.Header()
				if err != nil {
					bad("meganode %v: %v", c.m.Ptr(), err)
					continue
				}
				if h.Bounds.MinInf && !bytes.Equal(it.Key(), []byte{0}) || !h.Bounds.MinInf && !bytes.Equal(it.Key(), h.Bounds.Min) {
					bad("entry %q of %v names %v, whose min is %q (inf %v)", it.Key(), lm.m.Ptr(), c.m.Ptr(), h.Bounds.Min, h.Bounds.MinInf)
				}
				if n := len(children); n > 0 && prevLocal && s.meganodeAt(children[n-1].t.Right()) != c {
					bad("entry %q of %v names %v, but its left neighbour %v links to %v", it.Key(), lm.m.Ptr(), c.m.Ptr(), children[n-1].m.Ptr(), children[n-1].t.Right())
				}
				children = append(children, c)
				prevLocal = true
			}
			if err := it.Error(); err != nil {
				bad("entries of %v: %w", lm.m.Ptr(), err)
			}
			it.Close()
		}
		if len(children) == 0 {
			if !partial {
				bad("inner level %d without entries", first.level)
			}
			break
		}
		first = children[0]
	}
	for _, lm := range megas {
		if !seen[lm] && !partial {
			bad("meganode %v (level %d) is not reachable from the root", lm.m.Ptr(), lm.level)
		}
	}
	return errors.Join(errs...)
}
