package raftmux

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string // substring of the error; "" for valid
	}{
		{"defaults", Options{}, ""},
		{"advertise", Options{AdvertiseAddr: "10.0.0.1:7100"}, ""},
		{"advertise name", Options{AdvertiseAddr: "cell-1.internal:7100"}, ""},
		{"advertise ipv6", Options{AdvertiseAddr: "[fd00::1]:7100"}, ""},
		{"negative timeout", Options{HandshakeTimeout: -1}, "HandshakeTimeout"},
		{"negative pending", Options{MaxPendingHandshakes: -1}, "MaxPendingHandshakes"},
		{"negative backlog", Options{AcceptBacklog: -3}, "AcceptBacklog"},
		{"unspecified ip", Options{AdvertiseAddr: "0.0.0.0:7100"}, "not advertisable"},
		{"unspecified ipv6", Options{AdvertiseAddr: "[::]:7100"}, "not advertisable"},
		{"no host", Options{AdvertiseAddr: ":7100"}, "not advertisable"},
		{"port 0", Options{AdvertiseAddr: "10.0.0.1:0"}, "not advertisable"},
		{"no port", Options{AdvertiseAddr: "10.0.0.1"}, "advertise address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.EnsureDefaults().Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want an error about %s", err, tc.want)
			}
		})
	}
	o := (&Options{}).EnsureDefaults()
	if o.HandshakeTimeout != DefaultHandshakeTimeout || o.MaxPendingHandshakes != DefaultMaxPendingHandshakes ||
		o.AcceptBacklog != DefaultAcceptBacklog || o.Logger == nil {
		t.Fatalf("EnsureDefaults = %+v", o)
	}
}

func TestListenAdvertise(t *testing.T) {
	if _, err := Listen("0.0.0.0:0", Options{Logger: testLogger(t)}); !errors.Is(err, ErrNotAdvertisable) {
		t.Fatalf("Listen on 0.0.0.0 without AdvertiseAddr = %v, want ErrNotAdvertisable", err)
	}
	m, err := Listen("0.0.0.0:0", Options{Logger: testLogger(t), AdvertiseAddr: "cell-7.example:7100"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g := mustGroup(t, m, 1)
	if got := g.Addr().String(); got != "cell-7.example:7100" || m.Addr().String() != got {
		t.Fatalf("Group.Addr = %q, Mux.Addr = %q; want the advertised address", got, m.Addr())
	}
	trans := raft.NewNetworkTransport(g, 1, time.Second, io.Discard)
	defer trans.Close()
	if trans.LocalAddr() != "cell-7.example:7100" {
		t.Fatalf("NetworkTransport.LocalAddr = %q", trans.LocalAddr())
	}
}

// TestRegionsAreSeparate: a connection dialed for a region arrives at that
// region's Accept on the peer, and only there.
func TestRegionsAreSeparate(t *testing.T) {
	a, b := mustListen(t, Options{}), mustListen(t, Options{})
	regions := []uint32{1, 2, 0xffffff}
	got := map[uint32]<-chan net.Conn{}
	for _, r := range regions {
		mustGroup(t, a, r)
		got[r] = acceptAll(mustGroup(t, b, r))
	}
	for _, r := range regions {
		ga := a.group(r)
		for i := range 2 {
			c, err := ga.Dial(raft.ServerAddress(b.Addr().String()), patience)
			if err != nil {
				t.Fatalf("region %d: Dial: %v", r, err)
			}
			defer c.Close()
			var ac net.Conn
			select {
			case ac = <-got[r]:
			case <-time.After(patience):
				t.Fatalf("region %d: nothing accepted", r)
			}
			echo(ac)
			mustRoundTrip(t, c, strings.Repeat("x", i+1)+"hello")
		}
	}
	for _, r := range regions {
		select {
		case c := <-got[r]:
			t.Fatalf("region %d accepted an extra connection from %v", r, c.RemoteAddr())
		default:
		}
	}
	sa, sb := a.Stats(), b.Stats()
	for _, r := range regions {
		if sa.Dialed[r] != 2 || sb.Accepted[r] != 2 {
			t.Errorf("region %d: dialed %d, accepted %d; want 2 and 2", r, sa.Dialed[r], sb.Accepted[r])
		}
	}
	if len(sb.Rejected) != 0 || len(sa.DialFailed) != 0 {
		t.Errorf("rejected %v, dial failures %v; want none", sb.Rejected, sa.DialFailed)
	}
	if sa.Open != 6 || sb.Open != 6 {
		t.Errorf("open connections %d and %d, want 6 and 6", sa.Open, sb.Open)
	}
}

func TestGroupTaken(t *testing.T) {
	m := mustListen(t, Options{})
	g := mustGroup(t, m, 5)
	if _, err := m.Group(5); !errors.Is(err, ErrRegionTaken) {
		t.Fatalf("second Group(5) = %v, want ErrRegionTaken", err)
	}
	if got := m.Regions(); len(got) != 1 || got[0] != 5 {
		t.Fatalf("Regions = %v", got)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := m.Regions(); len(got) != 0 {
		t.Fatalf("Regions after Close = %v", got)
	}
	g2 := mustGroup(t, m, 5)
	// Closing the old group again must not unregister the new one.
	_ = g.Close()
	if got := m.Regions(); len(got) != 1 || m.group(5) != g2 {
		t.Fatalf("Regions after reopening = %v", got)
	}
}

// TestGroupClose: Close makes Accept fail like a closed listener, refuses
// later connections for the region, and closes the group's connections.
func TestGroupClose(t *testing.T) {
	a, b := mustListen(t, Options{}), mustListen(t, Options{})
	ga, gb := mustGroup(t, a, 3), mustGroup(t, b, 3)
	gOther := mustGroup(t, b, 4)
	acceptedOther := acceptAll(gOther)

	accErr := make(chan error, 1)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := gb.Accept()
		if err != nil {
			accErr <- err
			return
		}
		accepted <- c
		_, err = gb.Accept() // blocks until Close
		accErr <- err
	}()
	to := raft.ServerAddress(b.Addr().String())
	c, err := ga.Dial(to, patience)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bc := <-accepted
	echo(bc)
	mustRoundTrip(t, c, "before")

	if err := gb.Close(); err != nil {
		t.Fatal(err)
	}
	err = <-accErr
	if !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v, want ErrClosed and net.ErrClosed", err)
	}
	// The accepted connection was closed: the dialer reads EOF.
	if b := readUntilClosed(t, c); len(b) != 0 {
		t.Fatalf("read %q after the peer group closed", b)
	}
	if _, err := ga.Dial(to, patience); !errors.Is(err, ErrUnknownRegion) {
		t.Fatalf("Dial of a closed region = %v, want ErrUnknownRegion", err)
	}
	if _, err := gb.Dial(raft.ServerAddress(a.Addr().String()), patience); !errors.Is(err, ErrClosed) {
		t.Fatalf("Dial from a closed group = %v, want ErrClosed", err)
	}
	// Region 4 on the same mux is untouched.
	g4 := mustGroup(t, a, 4)
	c4, err := g4.Dial(to, patience)
	if err != nil {
		t.Fatalf("region 4: %v", err)
	}
	defer c4.Close()
	echo(<-acceptedOther)
	mustRoundTrip(t, c4, "other region")

	if n := b.Stats().Rejected[RejectUnknownRegion]; n != 1 {
		t.Fatalf("unknown-region rejections = %d, want 1", n)
	}
	if s := a.Stats(); s.DialFailed[3] != 1 || s.Dialed[3] != 1 {
		t.Fatalf("stats of the dialer: %+v", s)
	}
	// Closing the dialer's group closes its dialed connection too.
	if err := ga.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write on a closed group's connection = %v, want net.ErrClosed", err)
	}
}

// TestMuxClose: Close closes groups, connections and pending handshakes,
// and later calls fail with ErrClosed.
func TestMuxClose(t *testing.T) {
	a := mustListen(t, Options{})
	b, err := Listen("127.0.0.1:0", Options{Logger: testLogger(t), HandshakeTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ga, gb := mustGroup(t, a, 1), mustGroup(t, b, 1)
	acc := acceptAll(gb)
	c, err := ga.Dial(raft.ServerAddress(b.Addr().String()), patience)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo(<-acc)
	mustRoundTrip(t, c, "hi")
	// That connection's handshake goroutine may not have finished yet.
	waitFor(t, "no pending handshake", func() bool { return b.Stats().Pending == 0 })

	stalled := rawDial(t, b)
	if _, err := stalled.Write([]byte("CRF")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stalled handshake to be pending", func() bool { return b.Stats().Pending == 1 })

	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	readUntilClosed(t, stalled)
	readUntilClosed(t, c)
	if _, ok := <-acc; ok {
		t.Fatal("Accept returned a connection after Close")
	}
	if _, err := b.Group(2); !errors.Is(err, ErrClosed) {
		t.Fatalf("Group after Close = %v, want ErrClosed", err)
	}
	if _, err := gb.Dial(raft.ServerAddress(a.Addr().String()), patience); !errors.Is(err, ErrClosed) {
		t.Fatalf("Dial after Close = %v, want ErrClosed", err)
	}
	if _, err := ga.Dial(raft.ServerAddress(b.Addr().String()), patience); err == nil {
		t.Fatal("Dial of a closed mux succeeded")
	}
	s := b.Stats()
	if s.Open != 0 || s.Pending != 0 || s.Rejected[RejectClosed] != 1 {
		t.Fatalf("stats after Close: %+v", s)
	}
}

// TestBusy: a region whose Accept is not called holds AcceptBacklog
// connections; the next dial gets ErrBusy.
func TestBusy(t *testing.T) {
	a, b := mustListen(t, Options{}), mustListen(t, Options{AcceptBacklog: 2})
	ga, gb := mustGroup(t, a, 1), mustGroup(t, b, 1)
	to := raft.ServerAddress(b.Addr().String())
	for i := range 2 {
		c, err := ga.Dial(to, patience)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		defer c.Close()
	}
	if _, err := ga.Dial(to, patience); !errors.Is(err, ErrBusy) {
		t.Fatalf("dial beyond the backlog = %v, want ErrBusy", err)
	}
	if n := b.Stats().Rejected[RejectBusy]; n != 1 {
		t.Fatalf("busy rejections = %d, want 1", n)
	}
	// Accepting one frees one slot.
	c, err := gb.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c3, err := ga.Dial(to, patience)
	if err != nil {
		t.Fatalf("dial after an Accept: %v", err)
	}
	c3.Close()
}

// TestOverload: beyond MaxPendingHandshakes a connection is closed unread,
// and the slots come back when the stalled peers go away.
func TestOverload(t *testing.T) {
	a := mustListen(t, Options{})
	b := mustListen(t, Options{MaxPendingHandshakes: 2, HandshakeTimeout: time.Hour})
	ga := mustGroup(t, a, 1)
	echoAll(mustGroup(t, b, 1))
	s1, s2 := rawDial(t, b), rawDial(t, b)
	waitFor(t, "two pending handshakes", func() bool { return b.Stats().Pending == 2 })

	third := rawDial(t, b)
	if got := readUntilClosed(t, third); len(got) != 0 {
		t.Fatalf("the overloaded mux replied %q", got)
	}
	if n := b.Stats().Rejected[RejectOverload]; n != 1 {
		t.Fatalf("overload rejections = %d, want 1", n)
	}
	s1.Close()
	s2.Close()
	waitFor(t, "the stalled handshakes to end", func() bool { return b.Stats().Pending == 0 })
	c, err := ga.Dial(raft.ServerAddress(b.Addr().String()), patience)
	if err != nil {
		t.Fatalf("dial after the stalls ended: %v", err)
	}
	defer c.Close()
	mustRoundTrip(t, c, "ok again")
	if n := b.Stats().Rejected[RejectIO]; n != 2 {
		t.Fatalf("io rejections = %d, want 2 (the stalled peers hung up)", n)
	}
}

// TestSlowPeersDoNotBlockAccepts: while many peers sit in the middle of
// their header, other regions' connections are accepted and work.
func TestSlowPeersDoNotBlockAccepts(t *testing.T) {
	a := mustListen(t, Options{})
	b := mustListen(t, Options{HandshakeTimeout: time.Hour})
	for _, r := range []uint32{1, 2} {
		mustGroup(t, a, r)
		echoAll(mustGroup(t, b, r))
	}
	const stalls = 50
	good := appendHeader(nil, header{version: protoVersion, region: 1})
	for i := range stalls {
		if _, err := rawDial(t, b).Write(good[:i%headerSize]); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the stalled handshakes to be pending", func() bool { return b.Stats().Pending == stalls })
	for _, r := range []uint32{1, 2} {
		c, err := a.group(r).Dial(raft.ServerAddress(b.Addr().String()), patience)
		if err != nil {
			t.Fatalf("region %d: Dial while %d peers stall: %v", r, stalls, err)
		}
		defer c.Close()
		mustRoundTrip(t, c, "not blocked")
	}
	// The two handshakes stop counting as pending when their goroutines
	// are done, a moment after their connections were handed over (and
	// may have carried a round trip): wait for that, not for the round
	// trip.
	waitFor(t, "the accepted handshakes to end", func() bool { return b.Stats().Pending == stalls })
	if s := b.Stats(); len(s.Rejected) != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// echoAll echoes every connection g accepts.
func echoAll(g *Group) {
	ch := acceptAll(g)
	go func() {
		for c := range ch {
			echo(c)
		}
	}()
}

// TestBadHandshakes sends raw bytes and checks the verdict: the reply (if
// any), that the mux closed the connection, and the reason counted.
func TestBadHandshakes(t *testing.T) {
	m := mustListen(t, Options{HandshakeTimeout: 300 * time.Millisecond})
	echoAll(mustGroup(t, m, 1))
	good := appendHeader(nil, header{version: protoVersion, region: 1})
	badVersion := appendHeader(nil, header{version: 2, region: 1})
	badCRC := append([]byte(nil), good...)
	badCRC[offRegion] ^= 0x80
	for _, tc := range []struct {
		name      string
		send      []byte
		hangUp    bool   // half-close after sending
		wantReply []byte // nil: closed without a reply
		why       Reject
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), false, nil, RejectBadMagic},
		{"zeros", make([]byte, headerSize), false, nil, RejectBadMagic},
		{"short then hang up", good[:7], true, nil, RejectIO},
		{"nothing then hang up", nil, true, nil, RejectIO},
		{"short then silence", good[:15], false, nil, RejectTimeout},
		{"bad checksum", badCRC, false, appendReply(nil, statusBadHeader), RejectBadHeader},
		{"bad version", badVersion, false, appendReply(nil, statusBadVersion), RejectBadVersion},
		{"unknown region", appendHeader(nil, header{version: protoVersion, region: 2}), false, appendReply(nil, statusUnknownRegion), RejectUnknownRegion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := m.Stats().Rejected[tc.why]
			c := rawDial(t, m)
			if len(tc.send) > 0 {
				if _, err := c.Write(tc.send); err != nil {
					t.Fatal(err)
				}
			}
			if tc.hangUp {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			got := readUntilClosed(t, c)
			if string(got) != string(tc.wantReply) {
				t.Fatalf("reply % x, want % x", got, tc.wantReply)
			}
			waitFor(t, "the rejection to be counted", func() bool { return m.Stats().Rejected[tc.why] == before+1 })
		})
	}
	// A good header after all that still works, and got exactly the reply.
	c := rawDial(t, m)
	if _, err := c.Write(append(good, "ping"...)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, replySize+4)
	_ = c.SetReadDeadline(time.Now().Add(patience))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != string(appendReply(nil, statusOK))+"ping" {
		t.Fatalf("read % x, %v", buf, err)
	}
	waitFor(t, "no pending handshake", func() bool { return m.Stats().Pending == 0 })
	s := m.Stats()
	if s.Accepted[1] != 1 || len(s.Rejected) != 6 {
		t.Fatalf("stats %+v", s)
	}
}

// TestDialErrors: what a Dial says about peers that are no raftmux.
func TestDialErrors(t *testing.T) {
	m := mustListen(t, Options{})
	g := mustGroup(t, m, 1)

	// A plain TCP server that closes every connection at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer func() {
		ln.Close()
		wg.Wait()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	if _, err := g.Dial(raft.ServerAddress(ln.Addr().String()), patience); !errors.Is(err, ErrHandshake) {
		t.Fatalf("Dial of a closing server = %v, want ErrHandshake", err)
	}
	// Nothing listening.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln2.Addr().String()
	ln2.Close()
	if _, err := g.Dial(raft.ServerAddress(deadAddr), patience); err == nil || errors.Is(err, ErrHandshake) {
		t.Fatalf("Dial of a closed port = %v, want the network's error", err)
	}
	if n := m.Stats().DialFailed[1]; n != 2 {
		t.Fatalf("dial failures = %d, want 2", n)
	}
}
