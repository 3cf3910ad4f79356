package wire

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// waitIdle waits until bw's writer goroutine has nothing to write (or the
// writer failed).
func waitIdle(t testing.TB, bw *batchWriter) {
	t.Helper()
	waitFor(t, "the writer goroutine to go idle", func() bool {
		bw.mu.Lock()
		defer bw.mu.Unlock()
		return bw.mu.idle || bw.mu.err != nil
	})
}

// body is reply i's body: n bytes that say which reply they belong to.
func body(i uint64, n int) []byte {
	b := bytes.Repeat([]byte{byte(i)}, n)
	copy(b, fmt.Sprintf("reply %d", i))
	return b
}

// readReplies reads n replies from rd and checks each one's body against
// body(id, size(id)); it returns the ids in the order they came.
func readReplies(t *testing.T, rd *Reader, n int, size func(uint64) int) []uint64 {
	t.Helper()
	ids := make([]uint64, 0, n)
	for range n {
		f, err := rd.ReadFrame()
		if err != nil {
			t.Fatalf("after %d replies: %v", len(ids), err)
		}
		if want := body(f.Header.ID, size(f.Header.ID)); !bytes.Equal(f.Body, want) {
			t.Fatalf("reply %d: %d bytes, not its own (%q...)", f.Header.ID, len(f.Body), f.Body[:min(16, len(f.Body))])
		}
		ids = append(ids, f.Header.ID)
	}
	return ids
}

// One reply at a time on an idle plain socket, sent alone, is written by
// the goroutine that queued it (no hand-off to the writer goroutine), and
// arrives; replies not sent alone wait for the writer goroutine even when
// it is idle, so that a pipelined burst leaves in one write.
func TestReplyWriterDirect(t *testing.T) {
	for _, alone := range []bool{true, false} {
		t.Run(fmt.Sprintf("alone=%v", alone), func(t *testing.T) {
			client, server := tcpPair(t)
			rw, err := NewReplyWriter(server, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rw.Close()
			rd := mustReader(t, client, nil)
			size := func(uint64) int { return 100 }
			for i := uint64(1); i <= 50; i++ {
				waitIdle(t, rw.bw)
				send := rw.Write
				if alone {
					send = rw.sendAlone
				}
				if err := send(Header{Op: OpGet, ID: i}, body(i, 100)); err != nil {
					t.Fatal(err)
				}
				if ids := readReplies(t, rd, 1, size); ids[0] != i {
					t.Fatalf("got reply %d, want %d", ids[0], i)
				}
			}
			want := uint64(0)
			if alone {
				want = 50
			}
			if d := rw.bw.directs.Load(); d != want {
				t.Fatalf("%d of 50 replies written directly, want %d", d, want)
			}
		})
	}
}

// A peer that does not read fills the socket: a direct write hands what
// the socket did not take to the writer goroutine, so that Write never
// waits for the peer, and every reply arrives whole and in order once it
// reads.
func TestReplyWriterDirectFullSocket(t *testing.T) {
	client, server := tcpPair(t)
	rw, err := NewReplyWriter(server, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	const n, sz = 200, 60 << 10 // 12 MiB, far above the socket buffers
	size := func(uint64) int { return sz }
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for i := uint64(1); i <= n; i++ {
			if err := rw.sendAlone(Header{Op: OpGet, ID: i}, body(i, sz)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	select {
	case <-wrote:
	case <-time.After(30 * time.Second):
		t.Fatal("Write waited for a peer that does not read")
	}
	rd := mustReader(t, client, nil)
	for i, id := range readReplies(t, rd, n, size) {
		if id != uint64(i+1) {
			t.Fatalf("reply %d arrived %dth", id, i+1)
		}
	}
	if rw.bw.directs.Load() == 0 {
		t.Fatal("no reply was written directly")
	}
}

// Goroutines writing at once, direct writes and the writer goroutine
// taking turns with a reader that drains slowly now and then: every
// reply arrives whole, each goroutine's in the order it wrote them. Run
// with -race.
func TestReplyWriterDirectConcurrent(t *testing.T) {
	client, server := tcpPair(t)
	rw, err := NewReplyWriter(server, &Options{WriteBufferSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 400
	size := func(id uint64) int { return 16 + int(id*7919%9000) }
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				id := uint64(g*each + k + 1)
				if err := rw.sendAlone(Header{Op: OpGet, ID: id}, body(id, size(id))); err != nil {
					t.Error(err)
					return
				}
				if k%50 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	rd := mustReader(t, client, nil)
	last := make(map[uint64]uint64)
	for i, id := range readReplies(t, rd, writers*each, size) {
		if i%500 == 0 {
			time.Sleep(20 * time.Millisecond) // let the socket fill
		}
		g := (id - 1) / each
		if id <= last[g] {
			t.Fatalf("writer %d: reply %d after %d", g, id, last[g])
		}
		last[g] = id
	}
	wg.Wait()
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d replies written directly", rw.bw.directs.Load(), writers*each)
}

// The writer goroutine's write deadline outlives its write: a direct write
// after it passed is handed to the writer goroutine (which sets a new
// one), not failed. The timeout must outlast the big reply's write on a
// loaded machine (the reader drains 8 MiB meanwhile; at 20 ms it failed
// now and then under load with the connection cut): 500 ms, and each
// later reply waits past it.
func TestReplyWriterDirectAfterDeadline(t *testing.T) {
	client, server := tcpPair(t)
	const big = 8 << 20
	const timeout = 500 * time.Millisecond
	o := &Options{WriteTimeout: timeout, MaxFrameSize: 2 * big}
	rw, err := NewReplyWriter(server, o)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	rd := mustReader(t, client, o)
	size := func(id uint64) int {
		if id == 1 {
			return big
		}
		return 10
	}
	// Reply 1 does not fit the socket: the writer goroutine writes the
	// rest, under a write deadline.
	if err := rw.sendAlone(Header{Op: OpGet, ID: 1}, body(1, big)); err != nil {
		t.Fatal(err)
	}
	readReplies(t, rd, 1, size)
	for i := uint64(2); i <= 4; i++ {
		time.Sleep(timeout + 50*time.Millisecond) // the deadline passes
		directs := rw.bw.directs.Load()
		if err := rw.sendAlone(Header{Op: OpGet, ID: i}, body(i, 10)); err != nil {
			t.Fatal(err)
		}
		if ids := readReplies(t, rd, 1, size); ids[0] != i {
			t.Fatalf("got reply %d, want %d", ids[0], i)
		}
		if rw.bw.directs.Load() == directs {
			t.Fatalf("reply %d was not tried directly", i)
		}
	}
	if err := rw.Err(); err != nil {
		t.Fatal(err)
	}
}

// A direct write to a socket the peer reset fails the writer, once, with
// the socket's error, as a write of the writer goroutine does.
func TestReplyWriterDirectWriteError(t *testing.T) {
	client, server := tcpPair(t)
	rw, err := NewReplyWriter(server, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = client.SetLinger(0)
	client.Close() // a reset
	for i := uint64(1); rw.Err() == nil && i < 1000; i++ {
		waitIdle(t, rw.bw)
		_ = rw.sendAlone(Header{Op: OpGet, ID: i}, body(i, 100))
	}
	if rw.Err() == nil {
		t.Fatal("writes to a reset socket did not fail the writer")
	}
	if err := rw.Close(); err == nil {
		t.Fatal("Close hid the write error")
	}
}

// sendAlone is Write through SendAlone: a reply with a raw body, sent as
// the only one in flight.
func (w *ReplyWriter) sendAlone(h Header, b []byte) error {
	p := getBuf(HeaderSize + len(b))
	copy((*p)[HeaderSize:], b)
	h.Flags, h.BudgetMicros = FlagReply, 0
	h.put(*p, uint32(len(*p)))
	return w.bw.enqueue(p, true)
}

// A client that calls one at a time has its requests written by the
// calling goroutine (after the first two: a call is sent directly when it
// and the one before it were alone); a burst of concurrent calls has its
// first call queued with the rest, not sent alone.
func TestConnDirectOneAtATime(t *testing.T) {
	srv := startServer(t, nil, echo(0))
	c := mustDial(t, srv.addr(), nil)
	for range 30 {
		waitIdle(t, c.bw)
		mustPing(t, c)
	}
	if d := c.bw.directs.Load(); d < 28 {
		t.Fatalf("%d of 30 one-at-a-time calls written directly, want at least 28", d)
	}
}

// The server's rule for its replies (conn.answered in package server) is the
// same: see server's TestReplyAlone.
