package drill

import (
	"context"
	"maps"
	"sync"

	"github.com/cellstore/cell/client"
)

// fakeStore is an in-memory Store; its faults (struck through fakeTarget)
// break it in one of the ways the checks must catch.
type fakeStore struct {
	mu      sync.Mutex
	data    map[string]string
	stale   map[string]string // frozen copy served to gets while faulted
	broken  brokenness
	faulted bool
}

type brokenness int

const (
	correct brokenness = iota
	// forgetful: a fault wipes the store, acknowledged writes included.
	forgetful
	// staleReads: during a fault, gets return the state as of the
	// fault, while puts go on being applied and acknowledged.
	staleReads
)

func newFakeStore(b brokenness) *fakeStore { return &fakeStore{data: map[string]string{}, broken: b} }

func (s *fakeStore) Get(ctx context.Context, key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.data
	if s.faulted && s.broken == staleReads {
		m = s.stale
	}
	v, ok := m[string(key)]
	if !ok {
		return nil, client.ErrNotFound
	}
	return []byte(v), nil
}

func (s *fakeStore) Put(ctx context.Context, key, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[string(key)] = string(value)
	return nil
}

func (s *fakeStore) Delete(ctx context.Context, key []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.data[string(key)]; !ok {
		return client.ErrNotFound
	}
	delete(s.data, string(key))
	return nil
}

// fakeTarget strikes a fakeStore and records its calls.
type fakeTarget struct {
	s     *fakeStore
	calls []string
}

func (t *fakeTarget) Servers() []string { return []string{"a", "b", "c"} }

func (t *fakeTarget) Fault(ctx context.Context, kind FaultKind, server string) error {
	t.calls = append(t.calls, kind.String()+" "+server)
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.s.faulted = true
	switch t.s.broken {
	case forgetful:
		clear(t.s.data)
	case staleReads:
		t.s.stale = maps.Clone(t.s.data)
	}
	return nil
}

func (t *fakeTarget) Heal(ctx context.Context) error {
	t.calls = append(t.calls, "heal")
	t.s.mu.Lock()
	t.s.faulted = false
	t.s.mu.Unlock()
	return nil
}

// fakeLocator puts keys in regions 1 and 2 alternately, hosted by a and b.
type fakeLocator struct{}

func (fakeLocator) Locate(ctx context.Context, keys []string) (Placement, error) {
	pl := Placement{Region: map[string]uint32{}, Hosts: map[uint32]Member{1: {ID: "a", Addr: "a:1"}, 2: {ID: "b", Addr: "b:1"}}}
	for i, k := range keys {
		pl.Region[k] = uint32(1 + i%3%2) // two thirds in region 1
	}
	return pl, nil
}
