package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/wire"
)

// topology is an immutable snapshot of what the client knows of the
// cluster: the servers that answered, the regions they host and how to
// read each one-sided, the root meganode and the store's node geometry.
// A refresh builds a new one and swaps it in; operations load the current
// one when they start and after every refresh they trigger.
type topology struct {
	gen          uint64
	root         blink.Ptr // the root meganode; nil when no one said
	nodeSize     int
	maxKey       int
	meganodeSize uint64
	regions      map[uint32]*region
	servers      []*server // those that answered, in discovery order
}

// region is one region as the client reaches it.
type region struct {
	id    uint32
	epoch uint64
	srv   *server
	// rk and reader give one-sided access; both nil when the configured
	// provider cannot read the region (it is then searched server-side).
	rk     *rdma.RemoteKey
	reader rdma.Client
}

// loads reports whether one-sided reads of r are loads from this host's
// memory (shm): CPU work that never blocks, which Config.CPUSlots bound.
// Reads over tcp wait for replies and are not bounded.
func (r *region) loads() bool {
	return r != nil && r.rk != nil && r.rk.Provider == rdma.ProviderSHM
}

// route returns the server to send a request about meganode p to, and p's
// region (nil for the root as the server knows it, p == nil). ok is false
// when p's region is unknown.
func (t *topology) route(p blink.Ptr) (*server, *region, bool) {
	if p.IsNil() {
		return t.rootServer(), nil, len(t.servers) > 0
	}
	r := t.regions[p.Region()]
	if r == nil {
		return nil, nil, false
	}
	return r.srv, r, true
}

// rootServer is the server holding the root meganode, or the first one.
func (t *topology) rootServer() *server {
	if r := t.regions[t.root.Region()]; r != nil && !t.root.IsNil() {
		return r.srv
	}
	if len(t.servers) == 0 {
		return nil
	}
	return t.servers[0]
}

// inMeganode reports whether node p lies in meganode m (p's meganode is
// m's), by the meganode size all meganodes of a store share.
func (t *topology) inMeganode(p, m blink.Ptr) bool {
	return p.Region() == m.Region() && p.Offset() >= m.Offset() && p.Offset()-m.Offset() < t.meganodeSize
}

// refresh rebuilds the topology unless one newer than seen has been built
// meanwhile. Concurrent callers share one refresh.
func (c *Client) refresh(ctx context.Context, seen uint64) error {
	select {
	case c.refreshSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closing:
		return ErrClosed
	}
	defer func() { <-c.refreshSem }()
	if t := c.topo.Load(); t != nil && t.gen > seen {
		return nil
	}
	// After a failed refresh, callers within RetryBackoff share its
	// error: when every server is down, retrying operations must not
	// turn into a storm of dials.
	if c.lastRefresh.err != nil && time.Since(c.lastRefresh.at) < c.cfg.RetryBackoff {
		return c.lastRefresh.err
	}
	err := c.refreshLocked(ctx)
	c.lastRefresh.at, c.lastRefresh.err = time.Now(), err
	if err != nil && !c.lastRefresh.failing {
		c.log.Warn("cell client: topology refresh failed", slog.Any("error", err))
	} else if err == nil && c.lastRefresh.failing {
		c.log.Info("cell client: topology refreshed again")
	}
	c.lastRefresh.failing = err != nil
	return err
}

// refreshLocked asks the discoverer for the servers and every server for
// its metadata, in parallel, and swaps in the new topology. Servers that
// do not answer are left out; it fails only when none answers.
// REQUIRES: c.refreshSem held.
func (c *Client) refreshLocked(ctx context.Context) error {
	d, err := c.disc.discover(ctx)
	if err != nil {
		return wrapErr(ErrUnavailable, fmt.Errorf("discovery: %w", err))
	}
	c.noteDown(&d)
	if prev := c.topo.Load(); prev != nil {
		c.dropMoved(prev, d.hosts)
	}
	if len(d.idle) > 0 && len(d.idle) < len(d.addrs) {
		// Servers hosting no region are not asked: a dead one would hold
		// the refresh up for DialTimeout, and none has a region to tell
		// of. Their connections are closed below.
		d.addrs = slices.DeleteFunc(d.addrs, func(a string) bool { return slices.Contains(d.idle, a) })
	}
	d.addrs = c.withLeaders(d.addrs)
	if len(d.addrs) == 0 {
		return wrapErr(ErrUnavailable, errors.New("no servers registered"))
	}
	type answer struct {
		srv  *server
		meta wire.MetadataReply
		err  error
	}
	answers := make([]answer, len(d.addrs))
	var wg sync.WaitGroup
	for i, addr := range d.addrs {
		answers[i].srv = c.serverFor(addr)
		wg.Go(func() {
			a := &answers[i]
			a.err = c.metadata(ctx, a.srv, &a.meta)
		})
	}
	wg.Wait()

	prev := c.topo.Load()
	t := &topology{regions: make(map[uint32]*region), root: d.root}
	if prev != nil {
		t.gen = prev.gen
	}
	t.gen++
	var firstErr error
	for i := range answers {
		a := &answers[i]
		if a.err != nil {
			c.log.Debug("cell client: server did not answer metadata", slog.String("server", a.srv.addr), slog.Any("error", a.err))
			if firstErr == nil {
				firstErr = a.err
			}
			continue
		}
		m := &a.meta
		if t.nodeSize == 0 {
			t.nodeSize, t.meganodeSize = int(m.NodeSize), m.MeganodeSize
		} else if t.nodeSize != int(m.NodeSize) || t.meganodeSize != m.MeganodeSize {
			c.log.Warn("cell client: server disagrees on geometry, ignored", slog.String("server", a.srv.addr),
				slog.Int("node_size", int(m.NodeSize)), slog.Int("want", t.nodeSize))
			continue
		}
		t.servers = append(t.servers, a.srv)
		for j := range m.Regions {
			ri := &m.Regions[j]
			if old := t.regions[ri.ID]; old != nil && old.epoch >= ri.Epoch {
				continue
			}
			t.regions[ri.ID] = c.newRegion(a.srv, ri, d.keys[ri.ID])
		}
		// The root: the source's if it has one, else the one the server
		// holding the lowest region reports (docs/design.md §4).
		if d.root.IsNil() && !m.Root.IsNil() && (t.root.IsNil() || m.Root.Region() < t.root.Region()) {
			t.root = m.Root
		}
	}
	if len(t.servers) == 0 {
		return wrapErr(ErrUnavailable, fmt.Errorf("no server answered: %w", firstErr))
	}
	if t.nodeSize < blink.MinNodeSize || t.nodeSize > blink.MaxNodeSize || t.nodeSize&(t.nodeSize-1) != 0 ||
		t.meganodeSize < uint64(t.nodeSize) {
		return wrapErr(ErrServer, fmt.Errorf("servers report node size %d, meganode size %d", t.nodeSize, t.meganodeSize))
	}
	t.maxKey = blink.MaxKeySize(t.nodeSize)
	if prev != nil && reincarnated(prev, t) {
		// A region came back with a new epoch (its server restarted,
		// maybe empty): what was cached of it may name nodes of another
		// incarnation. Start over rather than meet it entry by entry.
		c.nodes.clear()
		c.paths.clear()
	}
	c.topo.Store(t)
	c.dropIdle(d.idle, t)
	if prev == nil || len(prev.servers) != len(t.servers) || len(prev.regions) != len(t.regions) || prev.root != t.root {
		c.log.Info("cell client: topology", slog.Int("servers", len(t.servers)), slog.Int("regions", len(t.regions)),
			slog.String("root", t.root.String()), slog.Int("node_size", t.nodeSize))
	}
	return nil
}

// downRegion is a region the region table shows with no live server.
type downRegion struct {
	servers []string  // its host and replicas, none a live member
	since   time.Time // when this client saw it lose its last live server; zero: never saw it served
}

// noteDown records the regions the discovery d shows with no live
// server, and when each lost its last one. REQUIRES: c.refreshSem held.
func (c *Client) noteDown(d *discovery) {
	if !d.table {
		return
	}
	var prev map[uint32]downRegion
	if p := c.down.Load(); p != nil {
		prev = *p
	}
	var next map[uint32]downRegion
	now := time.Now()
	for id, servers := range d.down {
		dr := downRegion{servers: servers}
		if old, ok := prev[id]; ok {
			dr.since = old.since
		} else {
			if c.servedRegions[id] {
				dr.since = now
			}
			c.log.Warn("cell client: region has no live server", slog.Uint64("region", uint64(id)),
				slog.String("servers", strings.Join(servers, ",")))
		}
		if next == nil {
			next = make(map[uint32]downRegion, len(d.down))
		}
		next[id] = dr
	}
	for _, id := range d.up {
		c.servedRegions[id] = true
	}
	if next == nil {
		c.down.Store(nil)
	} else {
		c.down.Store(&next)
	}
}

// regionDown returns a *RegionUnavailableError when the region table
// showed region with no live server at the last discovery and an
// operation on it is not to wait for one: unless the client saw it lose
// its last live server less than Config.RestartGrace ago, and FailFast is
// off (Config.RestartGrace). Nil otherwise, and for region 0 (unknown).
func (c *Client) regionDown(region uint32) error {
	m := c.down.Load()
	if m == nil || region == 0 {
		return nil
	}
	dr, ok := (*m)[region]
	if !ok {
		return nil
	}
	if !c.cfg.FailFast && !dr.since.IsZero() && time.Since(dr.since) < c.cfg.RestartGrace {
		return nil
	}
	return &RegionUnavailableError{Region: region, Servers: slices.Clone(dr.servers), Since: dr.since}
}

// regionOf is the region of meganode p, or of the root when p is nil (the
// root as the server knows it); 0 when unknown.
func (t *topology) regionOf(p blink.Ptr) uint32 {
	if p.IsNil() {
		if t.root.IsNil() {
			return 0
		}
		return t.root.Region()
	}
	return p.Region()
}

// failedRegion is the region an error of a request about meganode p is
// about: the one a server's status names (a server that does not host
// the region answers Unavailable or WrongServer naming it), else p's
// (regionOf).
func (t *topology) failedRegion(err error, p blink.Ptr) uint32 {
	var se *wire.StatusError
	if errors.As(err, &se) && se.Region != 0 {
		return se.Region
	}
	return t.regionOf(p)
}

// dropMoved closes the connections to every server that, in prev, served
// a region the table now gives to another host: requests waiting on the
// old host (dead, paused, cut off, or handing the region over) fail at
// once and are retried on the new host, instead of waiting for their
// deadline. Requests to the old host's other regions are retried too.
func (c *Client) dropMoved(prev *topology, hosts map[uint32]string) {
	var closed []*server
	for id, r := range prev.regions {
		a, ok := hosts[id]
		if !ok || a == r.srv.addr || slices.Contains(closed, r.srv) {
			continue
		}
		closed = append(closed, r.srv)
		c.closeIfSilent(r.srv, fmt.Sprintf("region %d moved to %s", id, a))
	}
}

// silentAfter is how long a server may take to answer a ping before
// closeIfSilent closes its connections.
const silentAfter = 500 * time.Millisecond

// closeIfSilent pings srv on its connections, in the background, and
// closes them if it does not answer within silentAfter: a dead, paused or
// cut-off server never will, and requests waiting on it would wait for
// their deadlines. A live server answers at once (pings are answered
// without queueing for a worker), and its waiting requests get their
// answers, or redirects, from it.
func (c *Client) closeIfSilent(srv *server, why string) {
	if !srv.hasConns() || !srv.probing.CompareAndSwap(false, true) {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer srv.probing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), silentAfter)
		defer cancel()
		f, err := srv.call(ctx, wire.OpPing, nil)
		if err == nil {
			f.Release()
			return
		}
		c.log.Debug("cell client: closing the connections of a server that does not answer", slog.String("server", srv.addr),
			slog.String("why", why), slog.Any("error", err))
		srv.markSuspect()
		srv.close()
	}()
}

// dropIdle closes the connections to the servers that host no region,
// unless the new topology has them: requests waiting on a host whose
// regions were taken over (killed, paused, cut off) fail at once and are
// retried on the new host, instead of waiting for their deadline.
func (c *Client) dropIdle(idle []string, t *topology) {
	for _, addr := range idle {
		if slices.ContainsFunc(t.servers, func(s *server) bool { return s.addr == addr }) {
			continue
		}
		c.mu.Lock()
		s := c.mu.servers[addr]
		c.mu.Unlock()
		if s != nil {
			c.closeIfSilent(s, "it hosts no region")
		}
	}
}

// reincarnated reports whether a region of prev has another epoch in t.
func reincarnated(prev, t *topology) bool {
	for id, r := range t.regions {
		if old := prev.regions[id]; old != nil && old.epoch != r.epoch {
			return true
		}
	}
	return false
}

// metadataTimeout bounds a refresh's wait for one server's metadata: a
// server that does not answer (dead, paused, cut off) is left out of the
// topology rather than hold up the routing of every other region.
const metadataTimeout = time.Second

// metadata asks srv to describe itself.
func (c *Client) metadata(ctx context.Context, srv *server, out *wire.MetadataReply) error {
	var req wire.MetadataRequest
	var scratch [16]byte
	ctx, cancel := context.WithTimeout(ctx, min(c.cfg.DialTimeout, metadataTimeout))
	defer cancel()
	f, err := srv.call(ctx, wire.OpMetadata, req.AppendTo(scratch[:0]))
	if err != nil {
		return err
	}
	defer f.Release()
	if err := out.Decode(f.Body); err != nil {
		return err
	}
	// Strings are the reply's own; region key bytes are not kept.
	return nil
}

// noteRedirect remembers the server a WrongServer reply named, so that
// the next refresh asks it too, and returns it (nil if none was named).
func (c *Client) noteRedirect(err error) *server {
	var se *wire.StatusError
	if !errors.As(err, &se) || se.Leader == "" || !errors.Is(err, wire.ErrWrongServer) {
		return nil
	}
	c.mu.Lock()
	if len(c.mu.leaders) < 64 {
		c.mu.leaders[se.Leader] = true
	}
	c.mu.Unlock()
	return c.serverFor(se.Leader)
}

// withLeaders adds the redirect targets seen to the discovered addresses.
func (c *Client) withLeaders(addrs []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for l := range c.mu.leaders {
		if !slices.Contains(addrs, l) {
			addrs = append(addrs, l)
		}
	}
	return addrs
}

// serverFor returns the server at addr, creating it on first sight.
func (c *Client) serverFor(addr string) *server {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.mu.servers[addr]; s != nil {
		return s
	}
	c.mu.nextID++
	s := newServer(c, c.mu.nextID, addr)
	c.mu.servers[addr] = s
	return s
}

// serverName returns the address of the server with the given selector
// ID, for metric labels.
func (c *Client) serverName(id uint64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.mu.servers {
		if uint64(s.id) == id {
			return s.addr
		}
	}
	return ""
}

// newRegion builds a region from a server's description of it, choosing
// the one-sided provider to read it with.
func (c *Client) newRegion(srv *server, ri *wire.RegionInfo, extra []rdma.RemoteKey) *region {
	r := &region{id: ri.ID, epoch: ri.Epoch, srv: srv}
	keys := append(regionKeys(ri), extra...)
	r.rk, r.reader = c.chooseAccess(ri.ID, keys)
	if r.reader != nil {
		// A provider whose reads are served by the server's CPU (tcp)
		// makes client-side searches cost that CPU more than
		// server-side ones: the selector must know (locality doc.go).
		srv.est.SetReadsShareServerCPU(!r.reader.Caps().SparesServerCPU)
	}
	return r
}

// regionKeys derives the remote keys a server advertises for a region.
// ReadAddr is either the tcp responder's "host:port" (with RemoteKey the
// tcp registration's key), or the JSON form of one rdma.RemoteKey or of a
// list of them (a server exposing several providers, shm among them).
func regionKeys(ri *wire.RegionInfo) []rdma.RemoteKey {
	addr := strings.TrimSpace(ri.ReadAddr)
	switch {
	case addr == "":
		return nil
	case strings.HasPrefix(addr, "["):
		var ks []rdma.RemoteKey
		if json.Unmarshal([]byte(addr), &ks) == nil {
			return ks
		}
		return nil
	case strings.HasPrefix(addr, "{"):
		var k rdma.RemoteKey
		if json.Unmarshal([]byte(addr), &k) == nil {
			return []rdma.RemoteKey{k}
		}
		return nil
	case ri.RemoteKey == 0:
		return nil
	}
	return []rdma.RemoteKey{{Provider: rdma.ProviderTCP, Key: rdma.Key(ri.RemoteKey), Region: ri.ID, Len: ri.Size, Addr: addr}}
}

// chooseAccess picks the remote key and reader for a region per
// Config.Provider: shm when the key is for this host and the file can be
// opened (auto, shm), else tcp (auto, tcp). Nil when none fits.
func (c *Client) chooseAccess(id uint32, keys []rdma.RemoteKey) (*rdma.RemoteKey, rdma.Client) {
	if c.cfg.Provider == ProviderFabric {
		return c.chooseFabric(id, keys)
	}
	var tcp, shm *rdma.RemoteKey
	for i := range keys {
		k := &keys[i]
		if k.Region != id {
			continue
		}
		switch k.Provider {
		case rdma.ProviderTCP:
			if tcp == nil && k.Addr != "" {
				tcp = k
			}
		case rdma.ProviderSHM:
			if shm == nil && c.shm != nil && k.Host == c.hostID && readable(k.Path) {
				shm = k
			}
		}
	}
	switch c.cfg.Provider {
	case ProviderSHM:
		if shm != nil {
			return shm, c.shm
		}
	case ProviderTCP:
		if tcp != nil {
			return tcp, c.tcp
		}
	default:
		if shm != nil {
			return shm, c.shm
		}
		if tcp != nil {
			return tcp, c.tcp
		}
	}
	return nil, nil
}

// chooseFabric picks a region's fabric key of the client's libfabric
// provider (Provider fabric); nil when the server registered none.
func (c *Client) chooseFabric(id uint32, keys []rdma.RemoteKey) (*rdma.RemoteKey, rdma.Client) {
	lp, ok := c.fabric.(interface{ LibfabricProvider() string })
	if !ok {
		return nil, nil
	}
	for i := range keys {
		if k := &keys[i]; k.Region == id && rdma.FabricKeyProvider(k) == lp.LibfabricProvider() {
			return k, c.fabric
		}
	}
	return nil, nil
}

// readable reports whether this process can open path for reading.
func readable(path string) bool {
	if path == "" {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}

// refreshLoop refreshes the topology every RefreshInterval and whenever
// the discoverer reports a change, until the client closes.
func (c *Client) refreshLoop() {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan struct{}, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.disc.watch(ctx, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	}()
	var tick <-chan time.Time
	if c.cfg.RefreshInterval > 0 {
		t := time.NewTicker(c.cfg.RefreshInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.closing:
			return
		case <-tick:
		case <-changed:
		case <-c.kick:
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*c.cfg.DialTimeout)
		_ = c.refresh(rctx, c.topo.Load().gen) // failures are logged by refresh
		rcancel()
	}
}
