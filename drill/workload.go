package drill

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellstore/cell/client"
)

// Store is what the workload runs against: *client.Client, or a fake in
// tests. Errors follow the client's contract (client.Put, client.Delete):
// client.ErrNotFound for a missing key, client.ErrOutcomeUnknown for a
// write that may have been applied, any other error for an operation that
// had no effect. Methods are called concurrently.
type Store interface {
	Get(ctx context.Context, key []byte) ([]byte, error)
	Put(ctx context.Context, key, value []byte) error
	Delete(ctx context.Context, key []byte) error
}

var _ Store = (*client.Client)(nil)

// Mix is the share of each kind of operation, in percent; they add up to
// 100.
type Mix struct {
	Get    int `json:"get"`
	Put    int `json:"put"`
	Delete int `json:"delete"`
}

// The YCSB core workloads the drill knows, by name (reads are gets,
// updates puts): A update heavy, B read mostly, C read only. "write" is
// puts and deletes only.
var namedMixes = map[string]Mix{
	"ycsb-a": {Get: 50, Put: 50},
	"ycsb-b": {Get: 95, Put: 5},
	"ycsb-c": {Get: 100},
	"write":  {Put: 80, Delete: 20},
}

// ParseMix reads a mix: a name (ycsb-a, ycsb-b, ycsb-c, write) or shares
// such as "get=50,put=40,delete=10".
func ParseMix(s string) (Mix, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if m, ok := namedMixes[s]; ok {
		return m, nil
	}
	var m Mix
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if !ok || err != nil || n < 0 {
			return Mix{}, fmt.Errorf("%w: mix %q: want ycsb-a, ycsb-b, ycsb-c, write or get=N,put=N,delete=N", ErrInvalid, s)
		}
		switch strings.TrimSpace(name) {
		case "get", "read":
			m.Get = n
		case "put", "update":
			m.Put = n
		case "delete":
			m.Delete = n
		default:
			return Mix{}, fmt.Errorf("%w: mix %q: unknown operation %q", ErrInvalid, s, name)
		}
	}
	if err := m.validate(); err != nil {
		return Mix{}, err
	}
	return m, nil
}

func (m Mix) validate() error {
	if m.Get < 0 || m.Put < 0 || m.Delete < 0 || m.Get+m.Put+m.Delete != 100 {
		return fmt.Errorf("%w: mix get=%d,put=%d,delete=%d: shares must add up to 100", ErrInvalid, m.Get, m.Put, m.Delete)
	}
	return nil
}

func (m Mix) String() string {
	return fmt.Sprintf("get=%d,put=%d,delete=%d", m.Get, m.Put, m.Delete)
}

// pick draws an operation kind.
func (m Mix) pick(rng *rand.Rand) Kind {
	switch n := rng.IntN(100); {
	case n < m.Get:
		return Get
	case n < m.Get+m.Put:
		return Put
	}
	return Delete
}

// Chooser picks a key index in [0, n) for a workload of n keys. It holds
// no mutable state: each client passes its own seeded generator, so one
// Chooser serves every client.
type Chooser interface {
	Next(rng *rand.Rand) int
}

// Workload is a YCSB-style load: Clients goroutines, each issuing one
// operation at a time on keys drawn from Keys keys (uniformly, unless
// Choose says otherwise), every put with a value no other put writes
// ("w<client>-<seq>").
type Workload struct {
	// Mix of operations. Default YCSB A (50% gets, 50% puts).
	Mix Mix `json:"mix"`
	// Keys is the number of keys. Default 1000.
	Keys int `json:"keys"`
	// Clients is the number of concurrent clients. Default 8.
	Clients int `json:"clients"`
	// Rate bounds the operations per second of all clients together; 0
	// (the default) does not bound it.
	Rate float64 `json:"rate,omitempty"`
	// KeyPrefix starts every key. Default "drill/".
	KeyPrefix string `json:"key_prefix"`
	// OpTimeout bounds each operation. Default 5 s.
	OpTimeout time.Duration `json:"op_timeout_ns"`
	// Seed seeds the clients' choices. Default 1.
	Seed uint64 `json:"seed"`
	// Choose picks the key of each operation. Default: uniform.
	Choose Chooser `json:"-"`
	// Distribution names Choose, for the report. Default "uniform".
	Distribution string `json:"distribution"`
}

// EnsureDefaults fills the zero fields with their defaults.
func (w *Workload) EnsureDefaults() {
	if w.Mix == (Mix{}) {
		w.Mix = namedMixes["ycsb-a"]
	}
	if w.Keys == 0 {
		w.Keys = 1000
	}
	if w.Clients == 0 {
		w.Clients = 8
	}
	if w.KeyPrefix == "" {
		w.KeyPrefix = "drill/"
	}
	if w.OpTimeout == 0 {
		w.OpTimeout = 5 * time.Second
	}
	if w.Seed == 0 {
		w.Seed = 1
	}
	if w.Choose == nil {
		w.Choose, w.Distribution = uniform(w.Keys), "uniform"
	}
}

// uniform picks every key with the same probability.
type uniform int

func (n uniform) Next(rng *rand.Rand) int { return rng.IntN(int(n)) }

// Validate checks the fields (after EnsureDefaults).
func (w *Workload) Validate() error {
	switch {
	case w.Keys < 1:
		return fmt.Errorf("%w: keys %d: want at least 1", ErrInvalid, w.Keys)
	case w.Clients < 1 || w.Clients > 1024:
		return fmt.Errorf("%w: clients %d: want 1..1024", ErrInvalid, w.Clients)
	case w.Rate < 0:
		return fmt.Errorf("%w: rate %v: want 0 (unbounded) or more", ErrInvalid, w.Rate)
	case w.OpTimeout <= 0:
		return fmt.Errorf("%w: op timeout %v: want more than 0", ErrInvalid, w.OpTimeout)
	}
	return w.Mix.validate()
}

// Key returns the i-th key of the workload.
func (w *Workload) Key(i int) string { return fmt.Sprintf("%sk%07d", w.KeyPrefix, i) }

// AllKeys returns every key of the workload, in order.
func (w *Workload) AllKeys() []string {
	keys := make([]string, w.Keys)
	for i := range keys {
		keys[i] = w.Key(i)
	}
	return keys
}

// Do performs one operation on s and records it in rec with its outcome
// (see the package comment). The operation's context is ctx with
// w.OpTimeout.
func (w *Workload) Do(ctx context.Context, s Store, rec *Recorder, op Op) Op {
	octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
	defer cancel()
	op.Call = rec.Now()
	var err error
	key := []byte(op.Key)
	switch op.Kind {
	case Get:
		var v []byte
		v, err = s.Get(octx, key)
		op.Value, op.Found = string(v), err == nil
	case Put:
		err = s.Put(octx, key, []byte(op.Value))
	case Delete:
		err = s.Delete(octx, key)
		op.Found = err == nil
	}
	op.Return = rec.Now()
	op.Outcome = classify(op.Kind, err)
	if errors.Is(err, client.ErrNotFound) {
		op.Value, op.Found = "", false
	} else if err != nil {
		op.Err = err.Error()
	}
	rec.Add(op)
	return op
}

// classify maps the client's error to an outcome (the client's contract:
// client.Put).
func classify(k Kind, err error) Outcome {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, client.ErrNotFound) && k != Put:
		return OK
	case errors.Is(err, client.ErrOutcomeUnknown) && k != Get:
		return Unknown
	}
	return Failed
}

// Preload puts every key once (value "p-<i>"), with w.Clients clients,
// retrying a key whose put failed until ctx ends. Every attempt is
// recorded (StagePreload).
func (w *Workload) Preload(ctx context.Context, s Store, rec *Recorder) error {
	var wg sync.WaitGroup
	errs := make([]error, w.Clients)
	for c := range w.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < w.Keys; i += w.Clients {
				for try := 0; ; try++ {
					op := w.Do(ctx, s, rec, Op{Client: c, Stage: StagePreload, Kind: Put, Key: w.Key(i), Value: fmt.Sprintf("p-%d-%d", i, try)})
					if op.Outcome == OK {
						break
					}
					if ctx.Err() != nil {
						errs[c] = fmt.Errorf("preload %s: %s: %w", op.Key, op.Err, ctx.Err())
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Run drives the clients until stop is closed, recording every operation
// (StageLoad). Operations in flight when stop closes finish (within
// OpTimeout, or when ctx ends).
func (w *Workload) Run(ctx context.Context, s Store, rec *Recorder, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for c := range w.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.runClient(ctx, s, rec, c, stop)
		}()
	}
	wg.Wait()
}

func (w *Workload) runClient(ctx context.Context, s Store, rec *Recorder, c int, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(w.Seed, uint64(c)))
	// With a rate, each client issues its share at a fixed interval,
	// the clients offset from each other; a late client does not burst to
	// catch up.
	var interval time.Duration
	next := time.Now()
	if w.Rate > 0 {
		interval = time.Duration(float64(w.Clients) / w.Rate * float64(time.Second))
		next = next.Add(interval * time.Duration(c) / time.Duration(w.Clients))
	}
	for seq := 0; ; seq++ {
		if interval > 0 {
			if d := time.Until(next); d > 0 {
				select {
				case <-time.After(d):
				case <-stop:
					return
				}
			}
			next = maxTime(next.Add(interval), time.Now())
		}
		select {
		case <-stop:
			return
		default:
		}
		if ctx.Err() != nil {
			return
		}
		op := Op{Client: c, Stage: StageLoad, Kind: w.Mix.pick(rng), Key: w.Key(w.Choose.Next(rng))}
		if op.Kind == Put {
			op.Value = fmt.Sprintf("w%d-%d", c, seq)
		}
		w.Do(ctx, s, rec, op)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
