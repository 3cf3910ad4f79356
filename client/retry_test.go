package client

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	cellserver "github.com/cellstore/cell/server"
)

// replyDropper is a TCP proxy between clients and one server that, once
// armed, closes the client's connection instead of forwarding the next
// bytes the server sends: the reply to the request in flight is lost
// after the server executed it, as when a connection breaks under a
// write.
type replyDropper struct {
	ln      net.Listener
	backend atomic.Pointer[string]
	armed   atomic.Bool
	dropped atomic.Int32

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newReplyDropper(t *testing.T) *replyDropper {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{ln: ln}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *replyDropper) addr() string { return p.ln.Addr().String() }

func (p *replyDropper) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		b := p.backend.Load()
		if b == nil {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", *b)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(s, c)
			_ = s.Close()
		}()
		go func() {
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && p.armed.CompareAndSwap(true, false) {
					p.dropped.Add(1)
					break
				}
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			_ = c.Close()
			_ = s.Close()
		}()
	}
}

func (p *replyDropper) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// appliedAs returns the server's count of applied records of kind.
func appliedAs(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	return counterSumWhere(t, reg, "cell_server_applied_total", "kind", kind)
}

// A write whose reply is lost after the server applied it is sent again,
// flagged as a retry with the same client id and sequence number, and
// answers as the first attempt did without applying twice (docs/design.md §9:
// "a region applies each at most once (a session table in its state
// machine), so a retry never applies a put twice around another client's
// write"): a delete that found its key still answers found, not
// NotFound, and the server counts the retries as duplicates.
func TestWriteRetriedAfterLostReply(t *testing.T) {
	proxy := newReplyDropper(t)
	rc := startReal(t, 1, func(o *cellserver.Options) { o.AdvertiseAddr = proxy.addr() })
	backend := rc.servers[0].ListenAddr()
	proxy.backend.Store(&backend)
	reg := rc.regs[0]
	cfg := realConfig(t, rc)
	c := mustClient(t, cfg)
	ctx := testCtx(t, 20*time.Second)

	if err := c.Put(ctx, []byte("k"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	puts := appliedAs(t, reg, "put")
	proxy.armed.Store(true)
	if err := c.Put(ctx, []byte("k"), []byte("v2")); err != nil {
		t.Fatalf("put whose reply was lost: %v", err)
	}
	if proxy.dropped.Load() != 1 {
		t.Fatal("the proxy dropped no reply: the test did not lose an outcome")
	}
	if got := appliedAs(t, reg, "put") - puts; got != 1 {
		t.Errorf("the put applied %v times, want 1", got)
	}
	if got := appliedAs(t, reg, "put_duplicate"); got != 1 {
		t.Errorf("%v retried puts answered as duplicates, want 1", got)
	}
	if v, err := c.Get(ctx, []byte("k")); err != nil || string(v) != "v2" {
		t.Fatalf("k = %q, %v", v, err)
	}

	proxy.armed.Store(true)
	if err := c.Delete(ctx, []byte("k")); err != nil {
		t.Fatalf("delete whose reply was lost: %v (NotFound: applied twice)", err)
	}
	if proxy.dropped.Load() != 2 {
		t.Fatal("the proxy dropped no second reply")
	}
	if got := appliedAs(t, reg, "delete_duplicate"); got != 1 {
		t.Errorf("%v retried deletes answered as duplicates, want 1", got)
	}
	if _, err := c.Get(ctx, []byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the delete: %v", err)
	}
}

// A write held back while 256 later writes of the same client applied is
// refused when it arrives (its sequence is below what the region's
// at-most-once table forgot of the client, so the region cannot tell
// whether a retry of it applied) and, since nothing of it was lost, sent
// again with a new sequence number: it applies once.
func TestWriteSeqPassed(t *testing.T) {
	rc := startReal(t, 1, nil)
	reg := rc.regs[0]
	cfg := realConfig(t, rc)
	held, release := make(chan uint64, 1), make(chan struct{})
	var first atomic.Bool
	cfg.TestingKnobs.BeforeWriteSend = func(key []byte, seq uint64) {
		if string(key) == "late" && first.CompareAndSwap(false, true) {
			held <- seq
			<-release
		}
	}
	c := mustClient(t, cfg)
	ctx := testCtx(t, 20*time.Second)
	done := make(chan error, 1)
	go func() { done <- c.Put(ctx, []byte("late"), []byte("v")) }()
	seq := <-held
	for i := range sessionWindowForTest + 1 {
		if err := c.Put(ctx, fmt.Appendf(nil, "k%03d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the held put: %v", err)
	}
	if got := appliedAs(t, reg, "put_unverifiable"); got != 1 {
		t.Errorf("%v puts refused below the floor, want 1 (the held put, sequence %d)", got, seq)
	}
	st := c.Stats()
	if n := st.Retry("seq-passed"); n != 1 {
		t.Errorf("%d seq-passed retries, want 1", n)
	}
	if got := appliedAs(t, reg, "put"); got != sessionWindowForTest+2 {
		t.Errorf("%v puts applied, want %d", got, sessionWindowForTest+2)
	}
	if v, err := c.Get(ctx, []byte("late")); err != nil || string(v) != "v" {
		t.Fatalf("late = %q, %v", v, err)
	}
}

// sessionWindowForTest is the server's at-most-once window per client
// (server/session.go sessionWindow).
const sessionWindowForTest = 256
