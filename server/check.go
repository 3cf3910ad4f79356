package server

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/server/rsm"
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
// long. OpCheck runs it while holding s.splits.mu (checkop.go), so that no
// split of this server is half done.
func (s *Server) Check() error {
	c := &treeCheck{s: s, seen: map[*rsm.Meganode]bool{}}
	megas := servedMeganodes(s.reps.servedList())
	for _, lm := range megas {
		for _, v := range lm.T.Check() {
			c.bad("meganode %v: %v: %w", lm.Ptr(), v, blink.ErrCorruption)
		}
	}
	root := s.servedMeganode(s.Root())
	if root == nil || root.Ptr() != s.Root() {
		return errors.Join(c.errs...)
	}
	c.tree(root)
	for _, lm := range megas {
		if !c.seen[lm] && !c.partial {
			c.bad("meganode %v (level %d) is not reachable from the root", lm.Ptr(), lm.Level)
		}
	}
	return errors.Join(c.errs...)
}

// treeCheck is one run of Check: the violations found, the meganodes met
// from the root, and whether some meganode of the tree is on another
// server (partial), which makes the orphan check moot.
type treeCheck struct {
	s       *Server
	errs    []error
	seen    map[*rsm.Meganode]bool
	partial bool
}

// bad records a violation.
func (c *treeCheck) bad(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("server: "+format, args...))
}

// tree checks the tree from root down, a level at a time.
func (c *treeCheck) tree(root *rsm.Meganode) {
	if r := root.T.Right(); !r.IsNil() {
		c.bad("root meganode %v has a right neighbour %v: the root did not move up", root.Ptr(), r)
	}
	first, leftmost := root, true // leftmost: first is its level's leftmost
	for range maxHops {
		level := c.level(first)
		if h, err := first.T.Header(); leftmost && (err != nil || !h.Bounds.MinInf) {
			c.bad("leftmost meganode %v of level %d does not start at -inf (%v)", first.Ptr(), first.Level, err)
		}
		if first.Level == 0 {
			return
		}
		var children []*rsm.Meganode
		children, leftmost = c.children(level)
		if len(children) == 0 {
			if !c.partial {
				c.bad("inner level %d without entries", first.Level)
			}
			return
		}
		first = children[0]
	}
}

// level checks the meganodes of first's level from first rightwards, as
// far as this server holds them, and returns them in order.
func (c *treeCheck) level(first *rsm.Meganode) []*rsm.Meganode {
	var level []*rsm.Meganode
	for lm := first; lm != nil; {
		if c.seen[lm] {
			c.bad("meganode %v met twice", lm.Ptr())
			break
		}
		c.seen[lm] = true
		if n := len(level); n > 0 {
			for _, v := range blink.CheckLinks(level[n-1].T, lm.T) {
				c.bad("%v", v)
			}
		}
		if lm.Level != first.Level {
			c.bad("meganode %v at level %d in level %d", lm.Ptr(), lm.Level, first.Level)
		}
		level = append(level, lm)
		next := lm.T.Right()
		if next.IsNil() {
			break
		}
		if lm = c.s.servedMeganode(next); lm == nil {
			c.partial = true
			break // on another server
		}
	}
	return level
}

// children checks the entries of level's meganodes against the meganodes
// they name, and returns those this server holds, in order, and whether
// the first of them is its level's leftmost (no entry before it named a
// meganode elsewhere).
func (c *treeCheck) children(level []*rsm.Meganode) (children []*rsm.Meganode, leftmost bool) {
	s := c.s
	prevLocal := false // the previous entry named a meganode here
	leftmost = true
	for _, lm := range level {
		it := lm.T.NewIter(nil)
		for ok := it.First(); ok; ok = it.Next() {
			if s.reps.servedReplica(it.Child().Region()) == nil {
				c.partial, prevLocal = true, false
				if len(children) == 0 {
					leftmost = false
				}
				continue
			}
			child := s.servedMeganode(it.Child())
			if child == nil || child.Ptr() != it.Child() {
				c.bad("entry %q of %v names %v, not a meganode of this server", it.Key(), lm.Ptr(), it.Child())
				continue
			}
			if !c.entryNames(lm, it.Key(), child) {
				continue
			}
			if n := len(children); n > 0 && prevLocal && s.servedMeganode(children[n-1].T.Right()) != child {
				c.bad("entry %q of %v names %v, but its left neighbour %v links to %v", it.Key(), lm.Ptr(), child.Ptr(), children[n-1].M.Ptr(), children[n-1].T.Right())
			}
			children = append(children, child)
			prevLocal = true
		}
		if err := it.Error(); err != nil {
			c.bad("entries of %v: %w", lm.Ptr(), err)
		}
		it.Close()
	}
	return children, leftmost
}

// entryNames checks that entry key of parent names child by its min
// ("\x00" for -inf); it reports false if child's header is unreadable.
func (c *treeCheck) entryNames(parent *rsm.Meganode, key []byte, child *rsm.Meganode) bool {
	h, err := child.T.Header()
	if err != nil {
		c.bad("meganode %v: %v", child.Ptr(), err)
		return false
	}
	if h.Bounds.MinInf && !bytes.Equal(key, []byte{0}) || !h.Bounds.MinInf && !bytes.Equal(key, h.Bounds.Min) {
		c.bad("entry %q of %v names %v, whose min is %q (inf %v)", key, parent.Ptr(), child.Ptr(), h.Bounds.Min, h.Bounds.MinInf)
	}
	return true
}
