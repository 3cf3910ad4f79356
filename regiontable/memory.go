package regiontable

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cellstore/cell/blink"
)

// Memory is a Store in process memory, for unit tests of the packages that
// use the region table. It keeps the whole contract except that leases
// never expire by themselves: ExpireMember and ExpireCampaign simulate a
// lost lease. Its event log is never compacted.
type Memory struct {
	mu struct {
		sync.Mutex
		closed  bool
		rev     int64
		members map[string]memberEntry
		regions map[uint32]Region
		root    blink.Ptr
		drain   map[string]bool
		missing map[string]time.Duration
		lastID  uint32
		events  []Event       // every change, in revision order
		changed chan struct{} // closed and replaced at every change
		// campaigns is the coordinator election, in the order the
		// campaigns joined: campaigns[0] leads.
		campaigns []*memCampaign
	}
}

type memberEntry struct {
	m   Member
	reg *memRegistration
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory table.
func NewMemory() *Memory {
	s := &Memory{}
	s.mu.members = make(map[string]memberEntry)
	s.mu.regions = make(map[uint32]Region)
	s.mu.changed = make(chan struct{})
	return s
}

// emitLocked records a change at the next revision. REQUIRES: s.mu held.
func (s *Memory) emitLocked(ev Event) {
	s.mu.rev++
	ev.Revision = s.mu.rev
	s.mu.events = append(s.mu.events, ev)
	close(s.mu.changed)
	s.mu.changed = make(chan struct{})
}

func (s *Memory) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("regiontable: %w", err)
	}
	if s.mu.closed {
		return ErrClosed
	}
	return nil
}

// RegisterMember implements Store.
func (s *Memory) RegisterMember(ctx context.Context, m Member) (Registration, error) {
	if err := validMember(&m); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if _, ok := s.mu.members[m.ID]; ok {
		return nil, fmt.Errorf("regiontable: member %s: %w", m.ID, ErrMemberExists)
	}
	r := &memRegistration{s: s, id: m.ID, done: make(chan struct{})}
	s.mu.members[m.ID] = memberEntry{m: m, reg: r}
	s.emitLocked(Event{Kind: MemberUp, Member: m})
	if _, ok := s.mu.missing[m.ID]; ok {
		delete(s.mu.missing, m.ID)
		s.emitLocked(Event{Kind: MissingSet, Member: Member{ID: m.ID}})
	}
	return r, nil
}

// EvictMember implements Store.
func (s *Memory) EvictMember(ctx context.Context, m Member) (bool, error) {
	if err := validMember(&m); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return false, err
	}
	e, ok := s.mu.members[m.ID]
	if !ok || e.m != m {
		return false, nil
	}
	s.removeMemberLocked(e.reg, fmt.Errorf("regiontable: member %s: evicted: %w", m.ID, ErrLeaseLost))
	return true, nil
}

// ExpireMember simulates the loss of member id's lease: its key goes and
// its Registration reports ErrLeaseLost. It reports whether id was
// registered.
func (s *Memory) ExpireMember(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.mu.members[id]
	if !ok {
		return false
	}
	s.removeMemberLocked(e.reg, fmt.Errorf("regiontable: member %s: lease expired: %w", id, ErrLeaseLost))
	return true
}

// removeMemberLocked ends registration r with err and deletes its key if it
// still holds it. REQUIRES: s.mu held.
func (s *Memory) removeMemberLocked(r *memRegistration, err error) {
	if r.ended {
		return
	}
	r.ended, r.err = true, err
	close(r.done)
	if e, ok := s.mu.members[r.id]; ok && e.reg == r {
		delete(s.mu.members, r.id)
		s.emitLocked(Event{Kind: MemberDown, Member: Member{ID: r.id}})
	}
}

type memRegistration struct {
	s    *Memory
	id   string
	done chan struct{}
	// Guarded by s.mu.
	ended bool
	err   error
}

func (r *memRegistration) Done() <-chan struct{} { return r.done }

func (r *memRegistration) Err() error {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.err
}

func (r *memRegistration) Close(context.Context) error {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.s.removeMemberLocked(r, nil)
	return nil
}

// Members implements Store.
func (s *Memory) Members(ctx context.Context) ([]Member, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.membersLocked(), nil
}

func (s *Memory) membersLocked() []Member {
	out := make([]Member, 0, len(s.mu.members))
	for _, e := range s.mu.members {
		out = append(out, e.m)
	}
	sort.Slice(out, func(i, j int) bool { return strings.Compare(out[i].ID, out[j].ID) < 0 })
	return out
}

// PutRegion implements Store.
func (s *Memory) PutRegion(ctx context.Context, r Region) error {
	if err := validRegion(&r); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	if old, ok := s.mu.regions[r.ID]; ok && !r.Supersedes(&old) {
		return fmt.Errorf("regiontable: region %d entry (host %s, term %d, epoch %d) older than the stored one (host %s, term %d, epoch %d): %w",
			r.ID, r.Host, r.Term, r.Epoch, old.Host, old.Term, old.Epoch, ErrStaleEpoch)
	}
	r = cloneRegion(r)
	s.mu.regions[r.ID] = r
	s.emitLocked(Event{Kind: RegionPut, Region: cloneRegion(r)})
	return nil
}

// Regions implements Store.
func (s *Memory) Regions(ctx context.Context) ([]Region, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.regionsLocked(), nil
}

func (s *Memory) regionsLocked() []Region {
	out := make([]Region, 0, len(s.mu.regions))
	for _, r := range s.mu.regions {
		out = append(out, cloneRegion(r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Region implements Store.
func (s *Memory) Region(ctx context.Context, id uint32) (Region, error) {
	if err := validRegionID(id); err != nil {
		return Region{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return Region{}, err
	}
	r, ok := s.mu.regions[id]
	if !ok {
		return Region{}, fmt.Errorf("regiontable: region %d: %w", id, ErrNotFound)
	}
	return cloneRegion(r), nil
}

// Root implements Store.
func (s *Memory) Root(ctx context.Context) (blink.Ptr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	return s.mu.root, nil
}

// SetRoot implements Store.
func (s *Memory) SetRoot(ctx context.Context, old, new blink.Ptr) (blink.Ptr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if s.mu.root != old {
		return s.mu.root, fmt.Errorf("regiontable: root is %v, not %v: %w", s.mu.root, old, ErrConflict)
	}
	if new != old {
		s.mu.root = new
		s.emitLocked(Event{Kind: RootSet, Root: new})
	}
	return new, nil
}

// AllocRegionID implements Store.
func (s *Memory) AllocRegionID(ctx context.Context) (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if s.mu.lastID >= blink.MaxRegionID {
		return 0, ErrExhausted
	}
	s.mu.lastID++
	return s.mu.lastID, nil
}

// Load implements Store.
func (s *Memory) Load(ctx context.Context) (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return State{}, err
	}
	var drain []string
	for id := range s.mu.drain {
		drain = append(drain, id)
	}
	slices.Sort(drain)
	var missing map[string]time.Duration
	if len(s.mu.missing) > 0 {
		missing = maps.Clone(s.mu.missing)
	}
	return State{Members: s.membersLocked(), Regions: s.regionsLocked(), Root: s.mu.root, Draining: drain, Missing: missing, Revision: s.mu.rev}, nil
}

// MarkMissing implements Store.
func (s *Memory) MarkMissing(ctx context.Context, id string, d time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return false, err
	}
	if err := validMissing(id, d); err != nil {
		return false, err
	}
	if _, member := s.mu.members[id]; member {
		return false, nil
	}
	if s.mu.missing == nil {
		s.mu.missing = make(map[string]time.Duration)
	}
	s.mu.missing[id] = d
	s.emitLocked(Event{Kind: MissingSet, Member: Member{ID: id}, Missing: true, MissingFor: d})
	return true, nil
}

// ClearMissing implements Store.
func (s *Memory) ClearMissing(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := ValidServerID(id); err != nil {
		return err
	}
	if _, marked := s.mu.missing[id]; !marked {
		return nil
	}
	delete(s.mu.missing, id)
	s.emitLocked(Event{Kind: MissingSet, Member: Member{ID: id}})
	return nil
}

// SetDraining implements Store.
func (s *Memory) SetDraining(ctx context.Context, id string, on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := ValidServerID(id); err != nil {
		return err
	}
	if s.mu.drain[id] == on {
		return nil
	}
	if s.mu.drain == nil {
		s.mu.drain = make(map[string]bool)
	}
	if on {
		s.mu.drain[id] = true
	} else {
		delete(s.mu.drain, id)
	}
	s.emitLocked(Event{Kind: DrainSet, Member: Member{ID: id}, Draining: on})
	return nil
}

// Watch implements Store.
func (s *Memory) Watch(ctx context.Context, revision int64) <-chan Event {
	ch := make(chan Event, 16)
	go s.watch(ctx, revision, ch)
	return ch
}

func (s *Memory) watch(ctx context.Context, revision int64, ch chan<- Event) {
	defer close(ch)
	next := revision + 1 // the revision of the next event to deliver
	for {
		s.mu.Lock()
		closed := s.mu.closed
		var pending []Event
		if i := sort.Search(len(s.mu.events), func(i int) bool { return s.mu.events[i].Revision >= next }); i < len(s.mu.events) {
			pending = slices.Clone(s.mu.events[i:])
		}
		changed := s.mu.changed
		s.mu.Unlock()
		for _, ev := range pending {
			if ev.Region.ReadKey != nil {
				ev.Region = cloneRegion(ev.Region)
			}
			select {
			case ch <- ev:
				next = ev.Revision + 1
			case <-ctx.Done():
				return
			}
		}
		if closed {
			select {
			case ch <- Event{Err: ErrClosed}:
			case <-ctx.Done():
			}
			return
		}
		if len(pending) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// Close ends every registration (their members go) and every watch.
func (s *Memory) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	for _, e := range s.mu.members {
		s.removeMemberLocked(e.reg, fmt.Errorf("regiontable: store closed: %w", ErrLeaseLost))
	}
	s.mu.closed = true // elects nobody else
	for len(s.mu.campaigns) > 0 {
		s.endCampaignLocked(s.mu.campaigns[0], fmt.Errorf("regiontable: store closed: %w", ErrLeaseLost))
	}
	close(s.mu.changed)
	s.mu.changed = make(chan struct{})
	return nil
}

// memCampaign is one campaign in the coordinator election, and its
// Leadership once elected.
type memCampaign struct {
	s       *Memory
	id      string
	elected chan struct{} // closed when it leads
	done    chan struct{} // closed when it ends
	// Guarded by s.mu.
	leads bool
	ended bool
	err   error
}

// Campaign implements Store.
func (s *Memory) Campaign(ctx context.Context, id string) (Leadership, error) {
	if err := ValidServerID(id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if err := s.check(ctx); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	c := &memCampaign{s: s, id: id, elected: make(chan struct{}), done: make(chan struct{})}
	s.mu.campaigns = append(s.mu.campaigns, c)
	s.electLocked()
	s.mu.Unlock()
	select {
	case <-c.elected:
		return c, nil
	case <-c.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.mu.closed {
			return nil, fmt.Errorf("regiontable: campaign of %s: %w", id, ErrClosed)
		}
		return nil, fmt.Errorf("regiontable: campaign of %s: %w", id, c.err)
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		s.endCampaignLocked(c, nil)
		return nil, fmt.Errorf("regiontable: campaign of %s: %w", id, ctx.Err())
	}
}

// electLocked makes the first campaign lead, unless the store is closed.
// REQUIRES: s.mu held.
func (s *Memory) electLocked() {
	if !s.mu.closed && len(s.mu.campaigns) > 0 && !s.mu.campaigns[0].leads {
		c := s.mu.campaigns[0]
		c.leads = true
		close(c.elected)
	}
}

// endCampaignLocked ends campaign c with err, withdraws it from the
// election and elects the next one. REQUIRES: s.mu held.
func (s *Memory) endCampaignLocked(c *memCampaign, err error) {
	if c.ended {
		return
	}
	c.ended, c.err = true, err
	close(c.done)
	s.mu.campaigns = slices.DeleteFunc(s.mu.campaigns, func(o *memCampaign) bool { return o == c })
	s.electLocked()
}

// ExpireCampaign simulates the loss of the session lease of every campaign
// of server id, waiting or leading: a leadership ends with ErrLeaseLost, a
// waiting Campaign fails with it, and the next campaigner is elected. It
// reports whether id campaigned.
func (s *Memory) ExpireCampaign(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found []*memCampaign
	for _, c := range s.mu.campaigns {
		if c.id == id {
			found = append(found, c)
		}
	}
	for _, c := range found {
		s.endCampaignLocked(c, fmt.Errorf("regiontable: campaign of %s: session lease expired: %w", id, ErrLeaseLost))
	}
	return len(found) > 0
}

// Campaigners returns the server IDs of the campaigns in the election,
// the leader's first, then the waiting ones in the order they joined.
// Tests use it to know that a server campaigns.
func (s *Memory) Campaigners() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, len(s.mu.campaigns))
	for i, c := range s.mu.campaigns {
		ids[i] = c.id
	}
	return ids
}

// Coordinator implements Store.
func (s *Memory) Coordinator(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return "", err
	}
	if len(s.mu.campaigns) == 0 {
		return "", fmt.Errorf("regiontable: no coordinator: %w", ErrNotFound)
	}
	return s.mu.campaigns[0].id, nil
}

func (c *memCampaign) Done() <-chan struct{} { return c.done }

func (c *memCampaign) Err() error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.err
}

func (c *memCampaign) Resign(context.Context) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.endCampaignLocked(c, nil)
	return nil
}
