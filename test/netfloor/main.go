// Command netfloor measures the least server CPU a request/reply costs
// in Go on this host, with Go's network poller and with an event loop of
// our own, so that a Cell server's CPU per get (BENCHMARKS.md §5) can be
// set against what its transport alone costs. The server does nothing
// with a request but answer it: each 40-byte request gets a 120-byte
// reply.
//
//	taskset -c 0 go run ./test/netfloor server -mode net   -addr 127.0.0.1:28190 &
//	taskset -c 0 go run ./test/netfloor server -mode epoll -addr 127.0.0.1:28191 &
//	taskset -c 1 go run ./test/netfloor load -addr 127.0.0.1:28190 -conns 16 -duration 8s
//
// Modes:
//   - net: a goroutine per connection calls net.Conn Read and Write (Go's
//     poller reads until EAGAIN: a second read call per request when one
//     request is in flight);
//   - epoll: one goroutine locked to its thread waits in epoll_wait
//     (level-triggered, as Redis's event loop) and reads each ready
//     socket once, then writes every reply with one write(2).
//
// The server prints, every -report, its CPU time (getrusage, user and
// system), read and write calls (/proc/self/io) and context switches
// (getrusage) per request over that window; the load generator prints
// requests/s. test/netfloor.sh runs the two modes in alternated pairs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	reqSize   = 40
	replySize = 120
)

var served atomic.Uint64

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: netfloor server|load [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "server":
		err = serverMain(os.Args[2:])
	case "load":
		err = loadMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "netfloor:", err)
		os.Exit(1)
	}
}

func serverMain(args []string) error {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	mode := fs.String("mode", "net", "net or epoll")
	addr := fs.String("addr", "127.0.0.1:28190", "listen address")
	report := fs.Duration("report", 2*time.Second, "how often to print CPU per request")
	procs := fs.Int("procs", 1, "GOMAXPROCS")
	fs.Parse(args)
	runtime.GOMAXPROCS(*procs)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	go reportLoop(*report)
	switch *mode {
	case "net":
		return serveNet(ln)
	case "epoll":
		return serveEpoll(ln)
	}
	return fmt.Errorf("unknown mode %q", *mode)
}

// --- Go's poller: a goroutine per connection ------------------------------

func serveNet(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 4096)
			reply := make([]byte, 16*replySize)
			have := 0
			for {
				n, err := c.Read(buf[have:])
				if err != nil {
					return
				}
				have += n
				k := have / reqSize
				if k == 0 {
					continue
				}
				if _, err := c.Write(reply[:k*replySize]); err != nil {
					return
				}
				served.Add(uint64(k))
				have = copy(buf, buf[k*reqSize:have])
			}
		}()
	}
}

// --- an event loop of our own ---------------------------------------------

// econn is one connection of the event loop: its socket and the bytes of
// a request read in part.
type econn struct {
	fd   int
	file *os.File // keeps the duplicated descriptor open
	buf  []byte
	have int
}

func serveEpoll(ln net.Listener) error {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	conns := map[int]*econn{}
	go func() { // accepts stay on Go's poller: they are rare
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f, err := c.(*net.TCPConn).File() // a blocking duplicate
			c.Close()
			if err != nil {
				continue
			}
			fd := int(f.Fd())
			if err := unix.SetNonblock(fd, true); err != nil {
				f.Close()
				continue
			}
			mu.Lock()
			conns[fd] = &econn{fd: fd, file: f, buf: make([]byte, 4096)}
			mu.Unlock()
			ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
			if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
				f.Close()
			}
		}
	}()
	runtime.LockOSThread()
	events := make([]unix.EpollEvent, 128)
	reply := make([]byte, 16*replySize)
	for {
		n, err := unix.EpollWait(ep, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return err
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			mu.Lock()
			c := conns[fd]
			mu.Unlock()
			if c == nil {
				continue
			}
			if !c.serve(reply) {
				unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, fd, nil)
				mu.Lock()
				delete(conns, fd)
				mu.Unlock()
				c.file.Close()
			}
		}
	}
}

// serve reads the socket once and answers every whole request; it
// reports false when the connection is done.
func (c *econn) serve(reply []byte) bool {
	n, err := unix.Read(c.fd, c.buf[c.have:])
	if err == unix.EAGAIN {
		return true
	}
	if err != nil || n == 0 {
		return false
	}
	c.have += n
	k := c.have / reqSize
	if k == 0 {
		return true
	}
	out := reply[:k*replySize]
	for len(out) > 0 {
		w, err := unix.Write(c.fd, out)
		if err == unix.EAGAIN {
			// The load generator reads every reply before it writes
			// again; a full socket buffer does not happen here.
			runtime.Gosched()
			continue
		}
		if err != nil {
			return false
		}
		out = out[w:]
	}
	served.Add(uint64(k))
	c.have = copy(c.buf, c.buf[k*reqSize:c.have])
	return true
}

// --- reporting ----------------------------------------------------------

func reportLoop(every time.Duration) {
	cpu0, cs0 := usage()
	r0, w0, n0 := ioCount("syscr"), ioCount("syscw"), served.Load()
	for range time.Tick(every) {
		cpu1, cs1 := usage()
		r1, w1, n1 := ioCount("syscr"), ioCount("syscw"), served.Load()
		if d := n1 - n0; d > 0 {
			fmt.Printf("requests %d  CPU µs/request %.2f  reads/request %.2f  writes/request %.2f  context switches/request %.3f\n",
				d, float64(cpu1-cpu0)/float64(time.Microsecond)/float64(d),
				float64(r1-r0)/float64(d), float64(w1-w0)/float64(d), float64(cs1-cs0)/float64(d))
		}
		cpu0, cs0, r0, w0, n0 = cpu1, cs1, r1, w1, n1
	}
}

// usage returns the process's CPU time (user and system) and its context
// switches (voluntary and not), summed over its threads.
func usage() (time.Duration, int64) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw + ru.Nivcsw
}

func ioCount(key string) uint64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+": "); ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}

// --- the load generator -------------------------------------------------

func loadMain(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:28190", "server address")
	conns := fs.Int("conns", 16, "connections, one request in flight on each")
	duration := fs.Duration("duration", 8*time.Second, "how long to run")
	fs.Parse(args)
	var done atomic.Bool
	var total atomic.Uint64
	var wg sync.WaitGroup
	errs := make(chan error, *conns)
	for range *conns {
		c, err := net.Dial("tcp", *addr)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			req := make([]byte, reqSize)
			reply := make([]byte, replySize)
			for !done.Load() {
				if _, err := c.Write(req); err != nil {
					errs <- err
					return
				}
				if _, err := io.ReadFull(c, reply); err != nil {
					errs <- err
					return
				}
				total.Add(1)
			}
		}()
	}
	start := time.Now()
	time.Sleep(*duration)
	done.Store(true)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	fmt.Printf("%d requests in %v: %.0f requests/s\n", total.Load(), time.Since(start).Round(time.Millisecond),
		float64(total.Load())/time.Since(start).Seconds())
	return nil
}
