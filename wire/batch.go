package wire

import (
	"bufio"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// batchWriter owns the write side of a connection: goroutines queue
// complete frames, and one writer goroutine copies them into a bufio.Writer
// and flushes whenever the queue runs empty, so that frames queued
// together leave in one write (Conn requests, ReplyWriter replies).
//
// Locking notes: mu guards queue, err and closing; the writer goroutine
// alone touches w and handed's stores.
type batchWriter struct {
	w       *bufio.Writer
	nc      net.Conn // for write deadlines; nil if the writer is not a net.Conn
	timeout time.Duration
	onError func(error) // called once, from the writer goroutine, on a write error

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
	go bw.loop()
	return bw
}

// enqueue queues a frame; the writer owns (and releases) p from now on,
// even when an error is returned.
func (bw *batchWriter) enqueue(p *[]byte) error {
	bw.mu.Lock()
	if err := bw.stoppedLocked(); err != nil {
		bw.mu.Unlock()
		putBuf(p)
		return err
	}
	wasEmpty := len(bw.mu.queue) == 0
	bw.mu.queue = append(bw.mu.queue, p)
	bw.mu.Unlock()
	if wasEmpty {
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
		batch, bw.mu.queue = bw.mu.queue, batch[:0]
		err, closing := bw.mu.err, bw.mu.closing
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
