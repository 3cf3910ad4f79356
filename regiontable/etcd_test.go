package regiontable_test

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/regiontable/embedded"
)

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startEtcd starts an embedded etcd on free loopback ports with its data in
// a temporary directory, stopped at cleanup.
func startEtcd(t *testing.T) *embedded.Etcd {
	t.Helper()
	var lastErr error
	for range 3 { // a port may be taken between freeAddr and etcd's listen
		e, err := embedded.Start(embedded.Options{
			Dir:        t.TempDir(),
			ClientAddr: freeAddr(t),
			PeerAddr:   freeAddr(t),
			Logger:     testLogger(t),
		})
		if err == nil {
			t.Cleanup(func() { _ = e.Close() })
			return e
		}
		lastErr = err
	}
	t.Fatalf("start embedded etcd: %v", lastErr)
	return nil
}

func TestEtcdContract(t *testing.T) {
	e := startEtcd(t)
	n := 0
	runContract(t, impl{
		open: func(t *testing.T) regiontable.Store {
			n++
			s, err := regiontable.OpenEtcd(e.Endpoints(), regiontable.EtcdOptions{
				Prefix:   fmt.Sprintf("/test%d", n),
				LeaseTTL: time.Second,
				Logger:   testLogger(t),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		expire: func(t *testing.T, s regiontable.Store, id string) {
			// Revoke the member's lease behind the store's back, as
			// etcd does when the lease's TTL runs out.
			es := s.(*regiontable.Etcd)
			resp, err := es.Client().Get(ctxT(t), es.Prefix()+"/members/"+id)
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("get member %s: %v %v", id, resp, err)
			}
			if _, err := es.Client().Revoke(ctxT(t), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
				t.Fatal(err)
			}
		},
		expireCampaign: func(t *testing.T, s regiontable.Store, id string) bool {
			// Revoke the session lease of id's election keys.
			es := s.(*regiontable.Etcd)
			resp, err := es.Client().Get(ctxT(t), es.Prefix()+"/coordinator/", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, kv := range resp.Kvs {
				if string(kv.Value) != id {
					continue
				}
				found = true
				if _, err := es.Client().Revoke(ctxT(t), clientv3.LeaseID(kv.Lease)); err != nil {
					t.Fatal(err)
				}
			}
			return found
		},
	})
}

// A server that dies without deregistering keeps its member key until the
// lease expires; then the ID can register again (the restart path).
func TestEtcdCrashedMemberExpires(t *testing.T) {
	e := startEtcd(t)
	opts := regiontable.EtcdOptions{Prefix: "/crash", LeaseTTL: time.Second, Logger: testLogger(t)}
	dead, err := regiontable.OpenEtcd(e.Endpoints(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.RegisterMember(ctxT(t), member("srv-a")); err != nil {
		t.Fatal(err)
	}
	// Crash: the connection goes without a revoke.
	_ = dead.Client().Close()

	s, err := regiontable.OpenEtcd(e.Endpoints(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.RegisterMember(ctxT(t), member("srv-a")); !errors.Is(err, regiontable.ErrMemberExists) {
		t.Fatalf("RegisterMember while the dead lease lives = %v, want ErrMemberExists", err)
	}
	start := time.Now()
	var r regiontable.Registration
	waitFor(t, func() bool {
		r, err = s.RegisterMember(ctxT(t), member("srv-a"))
		return err == nil
	}, "the dead member's lease to expire")
	t.Logf("dead member's key expired after %v", time.Since(start).Round(time.Millisecond))
	_ = r.Close(ctxT(t))
}

// A coordinator that dies without resigning keeps its election key until
// its session's lease expires; then the next campaigner is elected.
func TestEtcdCrashedCoordinatorExpires(t *testing.T) {
	e := startEtcd(t)
	opts := regiontable.EtcdOptions{Prefix: "/crash", LeaseTTL: time.Second, Logger: testLogger(t)}
	dead, err := regiontable.OpenEtcd(e.Endpoints(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Campaign(ctxT(t), "srv-a"); err != nil {
		t.Fatal(err)
	}
	s, err := regiontable.OpenEtcd(e.Endpoints(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := campaignAsync(s, ctxT(t), "srv-b")
	mustStillWait(t, b, "srv-b")
	// Crash: the connection goes without a revoke.
	start := time.Now()
	_ = dead.Client().Close()
	rb := awaitCampaign(t, b, "srv-b")
	if rb.err != nil {
		t.Fatalf("Campaign(srv-b) after the coordinator died: %v", rb.err)
	}
	t.Logf("srv-b elected %v after srv-a died", time.Since(start).Round(time.Millisecond))
	if got := coordinator(t, s); got != "srv-b" {
		t.Fatalf("Coordinator = %q, want srv-b", got)
	}
	_ = rb.l.Resign(ctxT(t))
	_ = dead.Close()
}

// etcd restores every lease with a fresh TTL when it restarts: the keys of
// a registration and a leadership that were lost while etcd was down come
// back, until Close and Resign revoke their leases (the server does so
// before it registers and campaigns again).
func TestEtcdLostLeasesRevokedAfterRestart(t *testing.T) {
	dir, clientAddr, peerAddr := t.TempDir(), freeAddr(t), freeAddr(t)
	var e *embedded.Etcd
	start := func() {
		t.Helper()
		var err error
		for range 50 { // the old listeners may linger for a moment
			e, err = embedded.Start(embedded.Options{Dir: dir, ClientAddr: clientAddr, PeerAddr: peerAddr, Logger: testLogger(t)})
			if err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("start etcd: %v", err)
	}
	start()
	t.Cleanup(func() { _ = e.Close() })
	const ttl = 3 * time.Second
	s, err := regiontable.OpenEtcd(e.Endpoints(), regiontable.EtcdOptions{Prefix: "/restart", LeaseTTL: ttl, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := mustRegister(t, s, member("srv-a"))
	l := mustCampaign(t, s, "srv-a")

	_ = e.Close()
	for _, done := range []<-chan struct{}{r.Done(), l.Done()} {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("registration or leadership not lost while etcd is down")
		}
	}
	if !errors.Is(r.Err(), regiontable.ErrLeaseLost) || !errors.Is(l.Err(), regiontable.ErrLeaseLost) {
		t.Fatalf("Err = %v, %v; want ErrLeaseLost", r.Err(), l.Err())
	}
	start()
	// The restored member key is back, for another TTL. (So is the
	// election key, unless the revoke the leadership tries in the
	// background when it is lost got through already.)
	if ids := memberIDs(t, s); !reflect.DeepEqual(ids, []string{"srv-a"}) {
		t.Fatalf("members after the restart = %v, want the restored srv-a", ids)
	}
	revoked := time.Now()
	if err := r.Close(ctxT(t)); err != nil {
		t.Fatalf("Close of the lost registration: %v", err)
	}
	if err := l.Resign(ctxT(t)); err != nil {
		t.Fatalf("Resign of the lost leadership: %v", err)
	}
	if ids := memberIDs(t, s); len(ids) != 0 {
		t.Fatalf("members after Close = %v", ids)
	}
	if id := coordinator(t, s); id != "" {
		t.Fatalf("coordinator after Resign = %q", id)
	}
	// The ID registers and campaigns again at once.
	r2 := mustRegister(t, s, member("srv-a"))
	l2 := mustCampaign(t, s, "srv-a")
	if d := time.Since(revoked); d >= ttl {
		t.Fatalf("registering again took %v: the restored lease was waited out", d)
	}
	_ = r2.Close(ctxT(t))
	_ = l2.Resign(ctxT(t))
	if err := r.Close(ctxT(t)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestEtcdRootFormats(t *testing.T) {
	p := blink.MakePtr(3, 0x4000)
	if s := regiontable.FormatRoot(p); s != "0x0000030000004000" {
		t.Fatalf("FormatRoot = %q", s)
	}
	for _, s := range []string{"0x0000030000004000", "3298534899712", " 3298534899712\n"} {
		got, err := regiontable.ParseRoot(s)
		if err != nil || got != p {
			t.Errorf("ParseRoot(%q) = %v, %v; want %v", s, got, err, p)
		}
	}
	for _, s := range []string{"", "x", "-1", "0x1g", "18446744073709551616"} {
		if _, err := regiontable.ParseRoot(s); !errors.Is(err, regiontable.ErrCorruption) {
			t.Errorf("ParseRoot(%q) = %v, want ErrCorruption", s, err)
		}
	}
}

// A value that is not JSON is reported as corruption, not skipped.
func TestEtcdCorruptEntry(t *testing.T) {
	e := startEtcd(t)
	s, err := regiontable.OpenEtcd(e.Endpoints(), regiontable.EtcdOptions{Prefix: "/corrupt", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Client().Put(ctxT(t), "/corrupt/regions/00000005", "{not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Region(ctxT(t), 5); !errors.Is(err, regiontable.ErrCorruption) {
		t.Fatalf("Region = %v, want ErrCorruption", err)
	}
	if _, err := s.Load(ctxT(t)); !errors.Is(err, regiontable.ErrCorruption) {
		t.Fatalf("Load = %v, want ErrCorruption", err)
	}
}

// A missing mark that is not a decimal ≥ 0, or names a bad server ID, is
// corruption too.
func TestEtcdCorruptMissingMark(t *testing.T) {
	e := startEtcd(t)
	for i, kv := range [][2]string{
		{"missing/s1", "yesterday"},
		{"missing/s1", "-5"},
		{"missing/s1", "1e9"},
		{"missing/s1", ""},
		{"missing/a b", "1000000000"},
	} {
		prefix := fmt.Sprintf("/corrupt-missing-%d", i)
		s, err := regiontable.OpenEtcd(e.Endpoints(), regiontable.EtcdOptions{Prefix: prefix, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Client().Put(ctxT(t), prefix+"/"+kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(ctxT(t)); !errors.Is(err, regiontable.ErrCorruption) {
			t.Errorf("%s = %q: Load = %v, want ErrCorruption", kv[0], kv[1], err)
		}
	}
}

func TestEtcdOptionsValidate(t *testing.T) {
	for _, o := range []regiontable.EtcdOptions{
		{Prefix: "cell"}, {Prefix: "/cell/"}, {LeaseTTL: 1500 * time.Millisecond}, {LeaseTTL: -time.Second},
	} {
		o.EnsureDefaults()
		if err := o.Validate(); !errors.Is(err, regiontable.ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", o, err)
		}
	}
	if _, err := regiontable.OpenEtcd(nil, regiontable.EtcdOptions{}); !errors.Is(err, regiontable.ErrInvalid) {
		t.Fatalf("OpenEtcd without endpoints = %v", err)
	}
}
