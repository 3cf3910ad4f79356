// Command netpollstarve shows why a Go client whose goroutines never block
// picks up its network replies late: Go's scheduler polls the network when
// a P runs out of runnable goroutines, and otherwise only from sysmon
// (every 10 ms at most once it is idle). A Cell client doing one-sided
// reads over shm is such a client: its reads are memory loads and never
// block, so the replies to its server-side operations (writes) wait.
// docs/bench-history.md §16 has the measurement; run it as
//
//	go run ./test/netpollstarve echo &          # the "server": 0.5 ms per reply
//	taskset -c 1 go run ./test/netpollstarve -busy 0
//	taskset -c 1 go run ./test/netpollstarve -busy 16
//
// It prints the round-trip latency of one goroutine doing request/reply
// over loopback TCP while -busy goroutines loop on 20 µs of CPU work each.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"time"
)

func spin(d time.Duration) {
	t := time.Now()
	for time.Since(t) < d {
	}
}

func main() {
	busy := flag.Int("busy", 16, "goroutines looping on CPU work")
	addr := flag.String("addr", "127.0.0.1:29999", "echo server address")
	dur := flag.Duration("duration", 3*time.Second, "measured time")
	flag.Parse()
	if flag.Arg(0) == "echo" {
		echo(*addr)
		return
	}
	for range *busy {
		go func() {
			for {
				spin(20 * time.Microsecond)
			}
		}()
	}
	c, err := net.Dial("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var lat []time.Duration
	b := make([]byte, 1)
	for end := time.Now().Add(*dur); time.Now().Before(end); {
		t := time.Now()
		if _, err := c.Write(b); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if _, err := c.Read(b); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		lat = append(lat, time.Since(t))
	}
	slices.Sort(lat)
	fmt.Printf("GOMAXPROCS %d, %d busy goroutines: %d round trips, p50 %v, p99 %v\n",
		runtime.GOMAXPROCS(0), *busy, len(lat), lat[len(lat)/2], lat[len(lat)*99/100])
}

// echo answers each byte after 0.5 ms, as a server doing some work would.
func echo(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			b := make([]byte, 1)
			for {
				if _, err := c.Read(b); err != nil {
					return
				}
				time.Sleep(500 * time.Microsecond)
				if _, err := c.Write(b); err != nil {
					return
				}
			}
		}()
	}
}
