package wire

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// batchWriter owns the write side of a connection: goroutines queue
// complete frames, and one writer goroutine copies them into a bufio.Writer
// and flushes whenever the queue runs empty, so that frames queued
// together leave in one write (Conn requests, ReplyWriter replies).
//
// A frame queued alone (its caller knows no other frame of the
// connection is in the making: the only request or reply in flight) while
// the writer is idle (nothing queued, nothing buffered) on a plain TCP or
// Unix socket is written at once by the goroutine that queued it, with
// one non-blocking write(2): no hand-off to the writer goroutine, the
// common case of a client with one request at a time. What the socket
// does not take at once goes to the writer goroutine, which waits for the
// socket as before, so the caller never blocks on it. Frames of a
// pipelined connection keep going through the writer goroutine, which
// sends a burst of them in one write(2).
//
// Locking notes: mu guards queue, err, closing, idle and direct; the
// writer goroutine alone touches w, and writes to the socket only while
// no direct write is in flight (direct); handed is stored by whichever
// goroutine is writing.
type batchWriter struct {
	w       *bufio.Writer
	nc      net.Conn        // for write deadlines; nil if the writer is not a net.Conn
	raw     syscall.RawConn // for direct writes; nil if the writer is not a plain socket
	timeout time.Duration
	onError func(error) // called once, on a write error

	// handed is the largest request id among the frames handed to w. A
	// frame with a larger id never reached the socket.
	handed atomic.Uint64

	wake chan struct{} // capacity 1: "the queue may be non-empty"
	done chan struct{} // closed when the writer goroutine has returned

	mu struct {
		sync.Mutex
		queue   []*[]byte // complete frames, in pooled buffers
		err     error     // sticky: set by fail or a write error
		closing bool      // write what is queued, flush, stop
		// idle: the writer goroutine found nothing queued or buffered
		// and waits for a signal; the next frame may be written directly.
		idle bool
		// direct: a goroutine is writing a frame to the socket itself;
		// the writer goroutine waits until it is done.
		direct bool
	}
	// dw is the state of the direct write in flight (one at a time:
	// mu.direct), kept here so that a direct write does not allocate.
	dw directWrite
	// directs counts the frames written directly, whole or in part.
	directs atomic.Uint64
}

// directWrite is the callback of a direct write (syscall.RawConn.Write)
// and what it returns.
type directWrite struct {
	fn     func(fd uintptr) bool
	frame  []byte
	n      int
	err    error
	called bool
}

// write is fn: one write(2) of frame, never waiting for the socket.
func (d *directWrite) write(fd uintptr) bool {
	d.called = true
	for {
		d.n, d.err = syscall.Write(int(fd), d.frame)
		if d.err != syscall.EINTR {
			return true
		}
	}
}

func newBatchWriter(w io.Writer, o *Options, onError func(error)) *batchWriter {
	bw := &batchWriter{
		w:       bufio.NewWriterSize(w, o.WriteBufferSize),
		timeout: o.WriteTimeout,
		onError: onError,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	bw.nc, _ = w.(net.Conn)
	// Only the socket types themselves: a wrapper (TLS, a test's fault
	// injector) must see every byte through its own Write.
	switch c := w.(type) {
	case *net.TCPConn:
		bw.raw, _ = c.SyscallConn()
	case *net.UnixConn:
		bw.raw, _ = c.SyscallConn()
	}
	bw.dw.fn = bw.dw.write
	go bw.loop()
	return bw
}

// enqueue queues a frame; the writer owns (and releases) p from now on,
// even when an error is returned. alone says that no other frame of this
// connection is in the making (the caller's request or reply is the only
// one in flight): then, if the writer is idle, the caller writes it
// itself. Without it frames wait for the writer goroutine, so that frames
// made one after another leave together (one write(2) for a pipelined
// burst, not one each).
func (bw *batchWriter) enqueue(p *[]byte, alone bool) error {
	bw.mu.Lock()
	if err := bw.stoppedLocked(); err != nil {
		bw.mu.Unlock()
		putBuf(p)
		return err
	}
	if alone && bw.mu.idle && bw.raw != nil {
		bw.mu.idle, bw.mu.direct = false, true
		bw.mu.Unlock()
		return bw.writeDirect(p)
	}
	bw.mu.idle = false
	wasEmpty := len(bw.mu.queue) == 0
	bw.mu.queue = append(bw.mu.queue, p)
	bw.mu.Unlock()
	if wasEmpty {
		bw.signal()
	}
	return nil
}

// writeDirect writes frame p to the socket with one non-blocking
// write(2) and hands what is left (all of it when the socket is full or
// its old write deadline has passed) to the writer goroutine, ahead of
// anything queued meanwhile. It owns p.
// REQUIRES: bw.mu.direct set by the caller, which holds the socket.
func (bw *batchWriter) writeDirect(p *[]byte) error {
	frame := *p
	if id := le.Uint64(frame[offID:]); id > bw.handed.Load() {
		bw.handed.Store(id) // before the write, as write does
	}
	bw.directs.Add(1)
	d := &bw.dw
	d.frame, d.n, d.err, d.called = frame, 0, nil, false
	err := bw.raw.Write(d.fn)
	n, werr, called := d.n, d.err, d.called
	d.frame = nil
	switch {
	case !called && err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
		werr = err // closed
	case werr == syscall.EAGAIN || n < 0:
		n, werr = 0, nil
	}
	var rest *[]byte
	if werr == nil && n < len(frame) {
		rest = getBuf(len(frame) - n)
		copy(*rest, frame[n:])
	}
	putBuf(p)

	bw.mu.Lock()
	bw.mu.direct = false
	if werr != nil {
		if bw.mu.err == nil {
			bw.mu.err = werr
		}
		bw.mu.Unlock()
		bw.signal()
		if bw.onError != nil {
			bw.onError(werr)
		}
		return nil // the frame's fate is the connection's, as for a queued one
	}
	if rest != nil {
		bw.mu.queue = append(bw.mu.queue, nil)
		copy(bw.mu.queue[1:], bw.mu.queue)
		bw.mu.queue[0] = rest
	}
	wake := len(bw.mu.queue) > 0 || bw.mu.closing
	bw.mu.idle = !wake
	bw.mu.Unlock()
	if wake {
		bw.signal()
	}
	return nil
}

// REQUIRES: bw.mu held.
func (bw *batchWriter) stoppedLocked() error {
	if bw.mu.err != nil {
		return bw.mu.err
	}
	if bw.mu.closing {
		return ErrClosed
	}
	return nil
}

func (bw *batchWriter) signal() {
	select {
	case bw.wake <- struct{}{}:
	default:
	}
}

// fail stops the writer at once, dropping queued frames. The first error
// sticks.
func (bw *batchWriter) fail(err error) {
	bw.mu.Lock()
	if bw.mu.err == nil {
		bw.mu.err = err
	}
	bw.mu.Unlock()
	bw.signal()
}

// close makes the writer write and flush what is queued, then stop; it
// waits for that and returns the sticky error, if any.
func (bw *batchWriter) close() error {
	bw.mu.Lock()
	bw.mu.closing = true
	bw.mu.Unlock()
	bw.signal()
	<-bw.done
	bw.mu.Lock()
	defer bw.mu.Unlock()
	return bw.mu.err
}

func (bw *batchWriter) err() error {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	return bw.mu.err
}

func (bw *batchWriter) loop() {
	defer func() {
		bw.mu.Lock()
		release(bw.mu.queue) // frames queued before a failure was recorded
		bw.mu.queue = nil
		bw.mu.Unlock()
		close(bw.done)
	}()
	var batch []*[]byte
	for {
		bw.mu.Lock()
		for bw.mu.direct && bw.mu.err == nil {
			// A direct write holds the socket; it signals when done.
			bw.mu.Unlock()
			<-bw.wake
			bw.mu.Lock()
		}
		batch, bw.mu.queue = bw.mu.queue, batch[:0]
		err, closing := bw.mu.err, bw.mu.closing
		bw.mu.idle = err == nil && !closing && len(batch) == 0 && bw.w.Buffered() == 0
		bw.mu.Unlock()

		if err != nil {
			release(batch)
			return
		}
		if len(batch) == 0 {
			if bw.w.Buffered() > 0 {
				if err := bw.write(nil); err != nil {
					return
				}
				continue // more may have been queued during the flush
			}
			if closing {
				return
			}
			<-bw.wake
			continue
		}
		if err := bw.write(batch); err != nil {
			return
		}
	}
}

// write hands batch to the bufio.Writer, or flushes it if batch is empty.
// On error it records the error, releases what is left and calls onError.
func (bw *batchWriter) write(batch []*[]byte) error {
	if bw.nc != nil && bw.timeout > 0 {
		_ = bw.nc.SetWriteDeadline(time.Now().Add(bw.timeout))
	}
	var err error
	if len(batch) == 0 {
		err = bw.w.Flush()
	}
	for i, p := range batch {
		if err != nil {
			putBuf(p)
			continue
		}
		if id := le.Uint64((*p)[offID:]); id > bw.handed.Load() {
			// Stored before the write: a frame whose bytes may reach the
			// socket is always counted.
			bw.handed.Store(id)
		}
		_, err = bw.w.Write(*p)
		putBuf(p)
		batch[i] = nil
	}
	if err == nil {
		return nil
	}
	bw.fail(err)
	if bw.onError != nil {
		bw.onError(err)
	}
	return err
}

func release(q []*[]byte) {
	for i, p := range q {
		putBuf(p)
		q[i] = nil
	}
}
