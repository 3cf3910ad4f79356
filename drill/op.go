package drill

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Kind is what an operation does.
type Kind uint8

const (
	Get Kind = iota
	Put
	Delete
)

var kindNames = [...]string{"get", "put", "delete"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// MarshalText writes the kind's name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Outcome is what the client's answer says about an operation.
type Outcome uint8

const (
	// OK: the operation took effect (a write) or returned its result (a
	// read).
	OK Outcome = iota
	// Failed: the operation certainly had no effect.
	Failed
	// Unknown: a write whose outcome the client does not know; it may
	// take effect at any time after its invoke, or never.
	Unknown
)

var outcomeNames = [...]string{"ok", "failed", "unknown"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// MarshalText writes the outcome's name.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Stage is the part of the run an operation belongs to.
type Stage uint8

const (
	// StagePreload: the first put of every key, before the load.
	StagePreload Stage = iota
	// StageLoad: the workload, while the schedule runs.
	StageLoad
	// StageVerify: the final reads, after recovery.
	StageVerify
)

var stageNames = [...]string{"preload", "load", "verify"}

func (s Stage) String() string {
	if int(s) < len(stageNames) {
		return stageNames[s]
	}
	return fmt.Sprintf("stage(%d)", s)
}

// MarshalText writes the stage's name.
func (s Stage) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Op is one recorded operation.
type Op struct {
	Client int    `json:"client"`
	Stage  Stage  `json:"stage"`
	Kind   Kind   `json:"kind"`
	Key    string `json:"key"`
	// Value is the value written (put) or read (get, when Found).
	Value string `json:"value,omitempty"`
	// Found: a get found the key, a delete found it there. Meaningful
	// only when Outcome is OK.
	Found   bool    `json:"found,omitempty"`
	Outcome Outcome `json:"outcome"`
	// Err is the client's error, for Failed and Unknown operations.
	Err string `json:"error,omitempty"`
	// Call and Return are the invoke and return times, monotonic, since
	// the recorder's start. Return is when the client returned, also for
	// an Unknown write (the checks treat such a write as never returning).
	Call   time.Duration `json:"call_ns"`
	Return time.Duration `json:"return_ns"`
}

// Latency is the operation's duration.
func (op *Op) Latency() time.Duration { return op.Return - op.Call }

// writes reports whether the operation is a write (put or delete).
func (op *Op) writes() bool { return op.Kind != Get }

func (op Op) String() string {
	s := fmt.Sprintf("client %d %s(%s", op.Client, op.Kind, op.Key)
	if op.Kind == Put {
		s += fmt.Sprintf(", %q", op.Value)
	}
	s += ")"
	switch {
	case op.Outcome != OK:
		s += " -> " + op.Outcome.String()
	case op.Kind == Get && op.Found:
		s += fmt.Sprintf(" -> %q", op.Value)
	case op.Kind != Put:
		s += fmt.Sprintf(" -> found=%v", op.Found)
	}
	return s
}

// Recorder collects the operations of a run. It is safe for concurrent
// use; times are taken from the monotonic clock, relative to Start.
type Recorder struct {
	start time.Time
	mu    struct {
		sync.Mutex
		ops []Op
	}
}

// NewRecorder returns a recorder whose time zero is now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Start is the recorder's time zero (wall clock, with its monotonic
// reading).
func (r *Recorder) Start() time.Time { return r.start }

// Now is the time since Start.
func (r *Recorder) Now() time.Duration { return time.Since(r.start) }

// Add records an operation.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	r.mu.ops = append(r.mu.ops, op)
	r.mu.Unlock()
}

// Ops returns a copy of the operations, ordered by invoke time.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	ops := slices.Clone(r.mu.ops)
	r.mu.Unlock()
	slices.SortStableFunc(ops, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
	return ops
}
