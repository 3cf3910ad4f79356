package client

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/wire"
)

// Conditional writes (docs/transactions.md §3): a put or delete of one key
// that applies only if a condition on the key's version or value holds,
// the test and the write one step of the key's region's log. A condition
// that does not hold is a definite answer, a *ConditionFailedError with
// the key's current version (0: absent): nothing changed.
//
// At most once, and a retried compare is re-evaluated: a conditional
// write whose answer was lost is sent again flagged as a retry (as Put
// is). If its first attempt applied, the region answers as then (success,
// with the version it gave) without evaluating again; if it did not (it
// failed its condition, or never arrived), the retry is evaluated afresh.
// So an IfVersion or IfAbsent test that failed fails again on retry
// unless the key changed in between (versions never return), while an
// IfValue or IfPresent test may hold on the retry. A retry the region
// cannot vouch for ends ErrOutcomeUnknown, as for any write.

// Cond is the condition of a conditional write. The zero Cond is not
// valid: build one with IfAbsent, IfPresent, IfVersion, IfValue,
// IfVersionCompare or IfValueCompare.
type Cond struct {
	target  wire.CondTarget
	compare wire.CondCompare
	version uint64
	value   []byte
}

// Compare is how a condition compares the key's version or value with
// the expected one: the key's Compare the expected.
type Compare uint8

// Compares.
const (
	Equal    = Compare(wire.CmpEqual)
	NotEqual = Compare(wire.CmpNotEqual)
	Less     = Compare(wire.CmpLess)
	Greater  = Compare(wire.CmpGreater)
)

// IfAbsent holds when the key is absent.
func IfAbsent() Cond { return Cond{target: wire.CondAbsent} }

// IfPresent holds when the key is present.
func IfPresent() Cond { return Cond{target: wire.CondPresent} }

// IfVersion holds when the key's version is v (an absent key's is 0, so
// IfVersion(0) is IfAbsent).
func IfVersion(v uint64) Cond { return IfVersionCompare(Equal, v) }

// IfVersionCompare holds when the key's version (0: absent) compares to v
// as c says.
func IfVersionCompare(c Compare, v uint64) Cond {
	return Cond{target: wire.CondVersion, compare: wire.CondCompare(c), version: v}
}

// IfValue holds when the key is present with value v (compared bytewise).
func IfValue(v []byte) Cond { return IfValueCompare(Equal, v) }

// IfValueCompare holds when the key is present and its value compares to
// v (bytewise) as c says. An absent key fails every value compare.
func IfValueCompare(c Compare, v []byte) Cond {
	return Cond{target: wire.CondValue, compare: wire.CondCompare(c), value: bytes.Clone(v)}
}

// request returns the condition's part of a CondRequest.
func (c *Cond) request() wire.CondRequest {
	r := wire.CondRequest{Target: c.target, Compare: c.compare}
	switch c.target {
	case wire.CondVersion:
		r.ExpectedVersion = c.version
	case wire.CondValue:
		r.ExpectedValue = c.value
	}
	return r
}

// valid reports whether c was built by one of the constructors.
func (c *Cond) valid() bool {
	switch c.target {
	case wire.CondAbsent, wire.CondPresent:
		return true
	case wire.CondVersion, wire.CondValue:
		return c.compare >= wire.CmpEqual && c.compare <= wire.CmpGreater
	}
	return false
}

// PutIf stores value under key if cond holds, and returns the version the
// put gave the key. A condition that does not hold is a
// *ConditionFailedError (errors.Is(err, ErrConditionFailed)) with the
// key's current version; nothing changed. ErrOutcomeUnknown as for Put.
// A key whose region has no versions yet (one written before versions,
// until its leader starts them) is retried within ctx's deadline.
func (c *Client) PutIf(ctx context.Context, key, value []byte, cond Cond) (uint64, error) {
	if !cond.valid() {
		return 0, wrapErr(ErrInvalidConfig, errInvalidCond)
	}
	start := time.Now()
	v, err := c.writeOp(ctx, writeReq{kind: opPut, key: key, value: value, cond: &cond})
	c.finish(opPut, locality.ServerSide, start, condErr(err))
	return v, err
}

// DeleteIf removes key if cond holds. A condition that does not hold is a
// *ConditionFailedError; a condition that holds on an absent key
// (IfAbsent, IfVersion(0)) deletes nothing and succeeds.
func (c *Client) DeleteIf(ctx context.Context, key []byte, cond Cond) error {
	if !cond.valid() {
		return wrapErr(ErrInvalidConfig, errInvalidCond)
	}
	start := time.Now()
	_, err := c.writeOp(ctx, writeReq{kind: opDelete, key: key, cond: &cond})
	c.finish(opDelete, locality.ServerSide, start, condErr(err))
	return err
}

// condErr is err as the client's error counters see it: a failed
// condition is an answer, not an error.
func condErr(err error) error {
	if err != nil && errors.Is(err, ErrConditionFailed) {
		return nil
	}
	return err
}

var errInvalidCond = errors.New("a zero Cond: build one with IfAbsent, IfPresent, IfVersion, IfValue or their Compare forms")
