package server

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/server/rsm"
	"github.com/cellstore/cell/wire"
)

// OpCheck (cellctl check) runs Server.Check and answers its violations.
//
// A check walks every node of every meganode and first waits for a split
// in progress to end: far longer than a tree operation. So it does not run
// on the tree workers, where it would hold one of the Options.Cores
// workers (the only one with --cores 1) for that long and queue every
// request behind it: the connection's reader hands it to a goroutine of
// its own, as it answers Ping itself. The check holds s.splits.mu, so that
// it sees the tree of meganodes between splits (Check's "at rest") and
// checks run one at a time; writes go on meanwhile, and writes that need
// a split wait for it as they would for a split (Options.MaxSplitWait).

// serveCheck answers one OpCheck request. The reply's queue time is the
// wait for s.splits.mu, its service time the check's. REQUIRES: c.inflight
// counts the request; serveCheck releases it and the frame.
func (c *conn) serveCheck(f wire.Frame, arrived time.Time) {
	s := c.s
	defer c.done()
	defer f.Release()
	h := &f.Header
	var (
		rep     wire.CheckReply
		queued  time.Duration
		started = arrived
	)
	err := func() error {
		var req wire.CheckRequest
		if err := req.Decode(f.Body); err != nil {
			return err
		}
		dl, _ := h.Deadline(arrived)
		if err := s.lockSplitsUntil(dl); err != nil {
			return err
		}
		defer s.splits.mu.Unlock()
		started = time.Now()
		queued = started.Sub(arrived)
		rep = checkReply(s.Check(), req.Limit, s.opts.MaxFrameSize)
		return nil
	}()
	service := time.Since(started)
	if len(rep.Violations) > 0 {
		s.log.Warn("server: check found invariant violations", slog.Int("count", int(rep.Count)),
			slog.String("first", rep.Violations[0]))
	}
	s.rpc.respond(c, h, &rep, err, queued, service)
}

// lockSplitsUntil takes s.splits.mu with the splits at rest
// (splitsAtRestLocked), waiting for a split in progress to end until
// deadline (zero: no limit; then Expired) and while the server runs (then
// Unavailable). A split holds s.splits.mu while its driver runs, but not
// while its separator waits for the split loop's retry, nor before a
// restart or a takeover resumes it.
func (s *Server) lockSplitsUntil(deadline time.Time) error {
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		if s.splits.mu.TryLock() {
			if s.splitsAtRestLocked() {
				return nil
			}
			s.splits.mu.Unlock()
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return wireErrorf(wire.StatusExpired, "a meganode split was still in progress at the deadline")
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.bgCtx.Done():
			t.Stop()
			return wireErrorf(wire.StatusUnavailable, "server stopping")
		}
	}
}

// splitsAtRestLocked reports whether no split of this server is in
// progress: no separator left for the split loop to retry, no split in
// progress in the applied state of a region it serves, no root meganode
// unpublished. REQUIRES: s.splits.mu held.
func (s *Server) splitsAtRestLocked() bool {
	if len(s.splits.pendingSeps) > 0 {
		return false
	}
	for _, rep := range s.reps.servedList() {
		if splits, newRoot := rep.sm.Progress(); len(splits) > 0 || !newRoot.IsNil() {
			return false
		}
	}
	return true
}

// checkReply lists the violations that err (Check's result) joins: at most
// limit of them (0: no limit), and only as many as fit in a reply frame of
// maxFrame bytes; Count counts them all. Each is folded onto one line.
func checkReply(err error, limit uint32, maxFrame int) wire.CheckReply {
	vs := violations(err)
	rep := wire.CheckReply{Count: uint32(len(vs))}
	room := maxFrame - wire.HeaderSize - wire.CheckReplyOverhead
	for _, v := range vs {
		if limit > 0 && uint32(len(rep.Violations)) >= limit {
			break
		}
		if room -= wire.CheckViolationOverhead + len(v); room < 0 {
			break
		}
		rep.Violations = append(rep.Violations, v)
	}
	return rep
}

// violations returns the messages of the errors err joins (errors.Join,
// nested), one line each; nil for nil.
func violations(err error) []string {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, violations(e)...)
		}
		return out
	}
	return []string{strings.ReplaceAll(err.Error(), "\n", " ")}
}

// serveReplicaHash answers one OpReplicaHash request: the SHA-256 of this
// server's replica of the region (served or followed), hashed as a
// snapshot image (the layout and every page that is not all zero) of the
// region exactly as of its applied index: a copy-on-write capture
// (meganode.Region.Capture) started under the replica's apply lock, then
// hashed while writes go on, as a snapshot is written. Replicas at one
// applied index are byte-identical (apply is deterministic), so their
// hashes are equal. REQUIRES: c.inflight counts the request;
// serveReplicaHash releases it and the frame.
func (c *conn) serveReplicaHash(f wire.Frame, arrived time.Time) {
	s := c.s
	defer c.done()
	defer f.Release()
	h := &f.Header
	var rep wire.ReplicaHashReply
	err := func() error {
		var req wire.ReplicaHashRequest
		if err := req.Decode(f.Body); err != nil {
			return err
		}
		r := s.reps.holding(req.Region)
		if r == nil {
			return &wire.StatusError{Status: wire.StatusUnknownRegion, Region: req.Region, Message: fmt.Sprintf("no replica of region %d here", req.Region)}
		}
		capture, applied, err := r.captureRegion()
		if err != nil {
			return err
		}
		defer capture.Close()
		sum := sha256.New()
		st, err := capture.WriteImage(sum)
		if err != nil {
			return fmt.Errorf("server: hash region %d: %w", req.Region, err)
		}
		rep = wire.ReplicaHashReply{Region: req.Region, Applied: applied, Pages: st.Pages}
		copy(rep.Hash[:], sum.Sum(nil))
		return nil
	}()
	s.rpc.respond(c, h, &rep, err, 0, time.Since(arrived))
}

// captureRegion starts a capture of the replica's region at its applied
// index, which it returns: writes wait for the start only.
func (rep *replica) captureRegion() (*meganode.Capture, uint64, error) {
	c, applied, err := rep.sm.Capture()
	if errors.Is(err, rsm.ErrClosed) {
		return nil, 0, &wire.StatusError{Status: wire.StatusUnknownRegion, Region: rep.regionID, Message: fmt.Sprintf("the replica of region %d here was dropped", rep.regionID)}
	}
	return c, applied, err
}
