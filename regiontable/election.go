package regiontable

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Campaign implements Store with etcd's concurrency.Election under
// <prefix>/coordinator: each campaign has its own concurrency.Session (a
// lease of EtcdOptions.LeaseTTL, kept alive while the campaign waits and
// while it leads) and puts a key named by that lease; the campaigner with
// the oldest key leads.
func (s *Etcd) Campaign(ctx context.Context, id string) (Leadership, error) {
	if err := ValidServerID(id); err != nil {
		return nil, err
	}
	// Close waits for campaigns in progress, so that they withdraw
	// their keys before the client closes.
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.campaigns.Add(1)
	s.mu.Unlock()
	defer s.campaigns.Done()
	ttl := int64(s.opts.LeaseTTL / time.Second)
	// Grant the lease here, bounded by ctx: NewSession would grant it
	// with the client's context, which waits as long as etcd is down.
	lease, err := s.cli.Grant(ctx, ttl)
	if err != nil {
		return nil, s.wrap("grant campaign lease of "+id, err)
	}
	sess, err := concurrency.NewSession(s.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(ttl)))
	if err != nil {
		s.revokeBounded(lease.ID)
		return nil, s.wrap("campaign session of "+id, err)
	}
	el := concurrency.NewElection(sess, s.key(coordinatorDir))
	rev, err := s.campaign(ctx, sess, el, id)
	if err != nil {
		sess.Orphan()
		s.revokeBounded(sess.Lease())
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	l := &etcdLeadership{s: s, id: id, sess: sess, key: el.Key(), cancel: cancel, stop: make(chan struct{}), done: make(chan struct{}), exited: make(chan struct{})}
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		cancel()
		sess.Orphan()
		s.revokeBounded(sess.Lease())
		return nil, ErrClosed
	}
	s.mu.leads[l] = struct{}{}
	s.mu.Unlock()
	go l.monitor(s.cli.Watch(wctx, l.key, clientv3.WithRev(rev+1)))
	return l, nil
}

// campaign runs el.Campaign until it wins, ctx ends, the store closes or
// the session is lost. It returns the revision at which the won key was
// seen to exist: the leadership watches for its deletion from there.
func (s *Etcd) campaign(ctx context.Context, sess *concurrency.Session, el *concurrency.Election, id string) (int64, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.closed, cancel)()
	defer context.AfterFunc(sess.Ctx(), cancel)() // the session's context ends with its keepalive
	res := make(chan error, 1)
	go func() { res <- el.Campaign(cctx, id) }()
	var err error
	select {
	case err = <-res:
	case <-cctx.Done():
		// Campaign withdraws its key before it returns, which needs
		// etcd: wait a while, then leave it behind (the lease is revoked
		// or expires anyway; the goroutine ends when etcd answers or the
		// client closes).
		t := time.NewTimer(s.opts.DialTimeout)
		select {
		case err = <-res:
		case <-t.C:
			err = cctx.Err()
		}
		t.Stop()
	}
	if err == nil {
		// Campaign waits for the deletion of the keys older than its own
		// but not for its own: make sure the session did not lose the
		// key meanwhile.
		var resp *clientv3.GetResponse
		resp, err = s.cli.Get(cctx, el.Key())
		if err == nil {
			if len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == el.Rev() {
				return resp.Header.Revision, nil
			}
			err = errors.New("campaign key gone")
		}
	}
	select {
	case <-sess.Done():
		return 0, fmt.Errorf("regiontable: campaign of %s: session lease lost: %w", id, ErrLeaseLost)
	default:
	}
	switch {
	case s.isClosed():
		return 0, fmt.Errorf("regiontable: campaign of %s: %w", id, ErrClosed)
	case ctx.Err() != nil:
		return 0, fmt.Errorf("regiontable: campaign of %s: %w", id, ctx.Err())
	}
	return 0, s.wrap("campaign of "+id, err)
}

// revokeBounded revokes lease within DialTimeout, ignoring failures: a
// lease that is not revoked expires within its TTL.
func (s *Etcd) revokeBounded(lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.DialTimeout)
	defer cancel()
	_, _ = s.cli.Revoke(ctx, lease)
}

// Coordinator implements Store: the server ID in the oldest election key.
func (s *Etcd) Coordinator(ctx context.Context) (string, error) {
	if s.isClosed() {
		return "", ErrClosed
	}
	resp, err := s.cli.Get(ctx, s.key(coordinatorDir)+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", s.wrap("get coordinator", err)
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("regiontable: no coordinator: %w", ErrNotFound)
	}
	return string(resp.Kvs[0].Value), nil
}

// etcdLeadership is a won election: it ends when the session's keepalive
// stops (the lease expired or was revoked) or the key is deleted.
//
// Locking notes: etcdLeadership.mu < Etcd.mu.
type etcdLeadership struct {
	s      *Etcd
	id     string
	sess   *concurrency.Session
	key    string
	cancel context.CancelFunc // ends the watch of key
	stop   chan struct{}      // closed by resign: monitor returns
	done   chan struct{}      // closed when the leadership ends
	exited chan struct{}      // closed when monitor returns

	mu struct {
		sync.Mutex
		resigning bool
		ended     bool
		err       error
		revoked   bool // resign revoked the lease, or found it gone
	}
}

// monitor waits for the end of the session or the deletion of the key.
func (l *etcdLeadership) monitor(wch clientv3.WatchChan) {
	defer close(l.exited)
	for {
		select {
		case <-l.stop:
			return
		case <-l.sess.Done():
			l.lost("session lease lost")
			return
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				// Cancelled by Resign or Close, or failed: the session
				// still tells a loss.
				wch = nil
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					l.lost("election key deleted")
					return
				}
			}
		}
	}
}

// lost ends the leadership with ErrLeaseLost unless it is being resigned,
// and lets go of the session.
func (l *etcdLeadership) lost(why string) {
	l.mu.Lock()
	resigning := l.mu.resigning
	l.mu.Unlock()
	if resigning {
		return
	}
	err := fmt.Errorf("regiontable: coordinator %s: %s: %w", l.id, why, ErrLeaseLost)
	l.s.opts.Logger.Error("regiontable: coordinator leadership lost", slog.String("server", l.id), slog.Any("err", err))
	l.end(err)
	l.cancel()
	go func() {
		l.sess.Orphan()
		l.s.revokeBounded(l.sess.Lease())
	}()
}

func (l *etcdLeadership) end(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.ended {
		return
	}
	l.mu.ended, l.mu.err = true, err
	close(l.done)
	l.s.mu.Lock()
	delete(l.s.mu.leads, l)
	l.s.mu.Unlock()
}

func (l *etcdLeadership) Done() <-chan struct{} { return l.done }

func (l *etcdLeadership) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.err
}

// Resign revokes the session's lease, which deletes the election key: the
// next campaigner is elected. It revokes the lease also after the
// leadership was lost: etcd restores every lease with a fresh TTL when it
// restarts, and the restored key would keep the next campaigners waiting
// for another TTL. A lease that is gone is no error; after another error
// Resign may be called again.
func (l *etcdLeadership) Resign(ctx context.Context) error {
	return l.resign(ctx, nil)
}

// closeStore resigns for Store.Close: the leadership ends as lost.
func (l *etcdLeadership) closeStore(ctx context.Context) error {
	return l.resign(ctx, fmt.Errorf("regiontable: coordinator %s: store closed: %w", l.id, ErrLeaseLost))
}

// resign ends the leadership with err (unless it ended already) and
// revokes its lease.
func (l *etcdLeadership) resign(ctx context.Context, err error) error {
	l.mu.Lock()
	if l.mu.revoked {
		l.mu.Unlock()
		return nil
	}
	first := !l.mu.resigning
	l.mu.resigning = true
	l.mu.Unlock()
	if first {
		close(l.stop)
		l.cancel()
		<-l.exited
		l.sess.Orphan()
		l.end(err)
	}
	if err := l.s.revoke(ctx, l.sess.Lease()); err != nil {
		return fmt.Errorf("regiontable: resign coordinator %s (its key expires within %v): %w", l.id, l.s.opts.LeaseTTL, err)
	}
	l.mu.Lock()
	l.mu.revoked = true
	l.mu.Unlock()
	return nil
}
