package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// claimHeader returns a request header whose length claims a body of
// claim bytes.
func claimHeader(claim int) []byte {
	b := AppendFrame(nil, Header{Op: OpPut, ID: 7}, nil)
	binary.LittleEndian.PutUint32(b, uint32(HeaderSize+claim))
	return b
}

// TestReaderLargeClaimCostsWhatArrived: a header claiming the largest
// frame followed by 4 KiB and the end of the stream allocates about what
// arrived, not the 4 MiB claimed.
func TestReaderLargeClaimCostsWhatArrived(t *testing.T) {
	stream := append(claimHeader(DefaultMaxBody), make([]byte, 4<<10)...)
	for _, pooled := range []bool{false, true} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range 8 {
			rd := mustReader(t, bytes.NewReader(stream), nil)
			var err error
			if pooled {
				_, err = rd.ReadFramePooled()
			} else {
				_, err = rd.ReadFrame()
			}
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("pooled %v: %v, want ErrUnexpectedEOF", pooled, err)
			}
		}
		runtime.ReadMemStats(&after)
		// 8 readers: 32 KiB bufio each plus at most one 64 KiB chunk.
		if got := after.TotalAlloc - before.TotalAlloc; got > 8*(bodyChunk+(64<<10)) {
			t.Errorf("pooled %v: 8 truncated 4 MiB claims allocated %d bytes", pooled, got)
		}
	}
}

// TestReaderLargeBodiesGrow: bodies around and above the chunk size, read
// in pieces, come out whole.
func TestReaderLargeBodiesGrow(t *testing.T) {
	for _, n := range []int{bodyChunk - 1, bodyChunk, bodyChunk + 1, 3*bodyChunk + 5, 1 << 20, DefaultMaxBody} {
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(i * 7)
		}
		stream := AppendFrame(nil, Header{Op: OpPut, ID: 1}, body)
		for _, pooled := range []bool{false, true} {
			rd := mustReader(t, io.MultiReader(&oneByteAtTimes{b: stream[:HeaderSize+100]}, bytes.NewReader(stream[HeaderSize+100:])), nil)
			var f Frame
			var err error
			if pooled {
				f, err = rd.ReadFramePooled()
			} else {
				f, err = rd.ReadFrame()
			}
			if err != nil || !bytes.Equal(f.Body, body) {
				t.Fatalf("n %d pooled %v: err %v, %d bytes", n, pooled, err, len(f.Body))
			}
			f.Release()
		}
	}
}

type oneByteAtTimes struct{ b []byte }

func (r *oneByteAtTimes) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = r.b[0]
	r.b = r.b[1:]
	return 1, nil
}

func pipeReader(t *testing.T, idle, frame time.Duration) (*Reader, net.Conn) {
	t.Helper()
	srv, cli := net.Pipe()
	t.Cleanup(func() { _ = srv.Close(); _ = cli.Close() })
	rd := mustReader(t, srv, nil)
	rd.SetTimeouts(srv, idle, frame)
	return rd, cli
}

func TestReaderIdleTimeout(t *testing.T) {
	rd, _ := pipeReader(t, 20*time.Millisecond, time.Hour)
	_, err := rd.ReadFramePooled()
	if !errors.Is(err, ErrIdleTimeout) || !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ErrFrameTimeout) {
		t.Fatalf("idle read: %v, want ErrIdleTimeout", err)
	}
}

// TestReaderFrameTimeout: a frame started and stalled fails with
// ErrFrameTimeout, in its header or in its body, even with no idle
// timeout.
func TestReaderFrameTimeout(t *testing.T) {
	frame := AppendFrame(nil, Header{Op: OpPing, ID: 1}, make([]byte, 100))
	for _, cut := range []int{1, HeaderSize - 1, HeaderSize + 50} {
		for _, idle := range []time.Duration{0, time.Hour} {
			rd, cli := pipeReader(t, idle, 20*time.Millisecond)
			go func() { _, _ = cli.Write(frame[:cut]) }()
			_, err := rd.ReadFramePooled()
			if !errors.Is(err, ErrFrameTimeout) || errors.Is(err, ErrIdleTimeout) {
				t.Fatalf("cut at %d, idle %v: %v, want ErrFrameTimeout", cut, idle, err)
			}
		}
	}
}

// TestReaderFrameTimeoutSparesIdle: without an idle timeout, a
// connection that stays quiet longer than the frame timeout between
// frames is not timed out, and a frame that arrives in pieces within it
// is read.
func TestReaderFrameTimeoutSparesIdle(t *testing.T) {
	rd, cli := pipeReader(t, 0, 50*time.Millisecond)
	frame := AppendFrame(nil, Header{Op: OpPing, ID: 1}, []byte("hello"))
	go func() {
		time.Sleep(150 * time.Millisecond)
		_, _ = cli.Write(frame[:10])
		_, _ = cli.Write(frame[10:])
	}()
	f, err := rd.ReadFramePooled()
	if err != nil || string(f.Body) != "hello" {
		t.Fatalf("%v %q", err, f.Body)
	}
	f.Release()
}

// TestConnRefusal: a refusal frame fails the calls pending on the Conn
// with a *ConnError that says nothing was sent, even for a request the
// socket took, and wraps ErrRefused.
func TestConnRefusal(t *testing.T) {
	srv, cli := net.Pipe()
	defer srv.Close()
	c, err := NewConn(cli, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		rd := mustReader(t, srv, nil)
		if f, err := rd.ReadFrame(); err == nil && f.Header.Op == OpPut {
			_, _ = srv.Write(RefusalFrame("connection limit: test"))
		}
		_ = srv.Close()
	}()
	_, err = c.Call(context.Background(), OpPut, []byte("x"))
	var ce *ConnError
	if !errors.As(err, &ce) || ce.Sent || !errors.Is(err, ErrRefused) || !errors.Is(err, ErrOverloaded) {
		t.Fatalf("call on a refused connection: %v, want an unsent ConnError wrapping ErrRefused", err)
	}
}
