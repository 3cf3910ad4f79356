// Command memload loads the paper's workload (random keys of 8-64 bytes,
// values of 8-256 bytes, uniform lengths, a fixed seed) into a Cell
// cluster, a Redis server or an etcd server, or into a google/btree in its
// own process, for test/memory-compare.sh (BENCHMARKS.md §15). The records
// are those of blink's engine benchmarks (blink/bench_test.go, workload
// with seed 42): the first -n of the same generator.
//
//	go run ./test/memload -target cell  -addr 127.0.0.1:2379 -n 1000000
//	go run ./test/memload -target redis -addr 127.0.0.1:6379 -n 1000000
//	go run ./test/memload -target etcd  -addr 127.0.0.1:2379 -n 1000000
//	go run ./test/memload -target gbtree -n 1000000
//
// It prints one line of "name=value" fields: the records and their bytes
// (keys plus values), the seconds the load took and, per target, what it
// can read itself: etcd's db size and db size in use (the Status RPC), and
// for gbtree the Go heap the tree grew (after a GC) and this process's
// RSS with the tree built and the workload's own copies dropped. Cell's
// and Redis's memory the script reads from the servers.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/internal/paperload"
	gbtree "github.com/google/btree"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	target := flag.String("target", "cell", "cell, redis, etcd or gbtree")
	addr := flag.String("addr", "", "cell: etcd endpoint of the cluster; redis: server address; etcd: client endpoint")
	n := flag.Int("n", 1_000_000, "records")
	seed := flag.Uint64("seed", 42, "workload seed (42: blink's benchmarks' records)")
	clients := flag.Int("clients", 64, "concurrent writers (cell, etcd)")
	batch := flag.Int("etcd-batch", 1, "etcd: puts per transaction (1: a Put each; at most etcd's --max-txn-ops, 128)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("memload: ")

	keys, vals := paperload.Records(*n, *seed)
	var data uint64
	for i := range keys {
		data += uint64(len(keys[i]) + len(vals[i]))
	}
	start := time.Now()
	extra := ""
	var err error
	switch *target {
	case "cell":
		err = loadCell(*addr, keys, vals, *clients)
	case "redis":
		err = loadRedis(*addr, keys, vals)
	case "etcd":
		extra, err = loadEtcd(*addr, keys, vals, *clients, *batch)
	case "gbtree":
		extra = loadGBTree(keys, vals)
	default:
		err = fmt.Errorf("unknown -target %q", *target)
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("target=%s records=%d data_bytes=%d load_seconds=%.1f%s\n", *target, len(keys), data, time.Since(start).Seconds(), extra)
}

// parallel runs fn(i) for i in [0, n) on workers goroutines, stopping at
// the first error, and prints progress to stderr every 10 s.
func parallel(n, workers int, fn func(i int) error) error {
	var next, done atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				log.Printf("%d of %d", done.Load(), n)
			}
		}
	}()
	defer close(stop)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { firstErr = err })
					next.Store(int64(n))
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return firstErr
}

func loadCell(addr string, keys, vals [][]byte, workers int) error {
	ctx := context.Background()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.New(dctx, client.Config{Endpoints: []string{addr}})
	if err != nil {
		return err
	}
	defer c.Close()
	return parallel(len(keys), workers, func(i int) error {
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err = c.Put(pctx, keys[i], vals[i])
			cancel()
			if err == nil {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Errorf("put %d: %w", i, err)
	})
}

// loadRedis SETs every record over one connection, pipelined 1,000
// commands at a time (RESP written by hand: no Redis client in go.mod).
func loadRedis(addr string, keys, vals [][]byte) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	w := bufio.NewWriterSize(conn, 1<<20)
	r := bufio.NewReader(conn)
	const batch = 1000
	for lo := 0; lo < len(keys); lo += batch {
		hi := min(lo+batch, len(keys))
		for i := lo; i < hi; i++ {
			fmt.Fprintf(w, "*3\r\n$3\r\nSET\r\n$%d\r\n", len(keys[i]))
			w.Write(keys[i])
			fmt.Fprintf(w, "\r\n$%d\r\n", len(vals[i]))
			w.Write(vals[i])
			w.WriteString("\r\n")
		}
		if err := w.Flush(); err != nil {
			return err
		}
		for i := lo; i < hi; i++ {
			line, err := r.ReadString('\n')
			if err != nil {
				return err
			}
			if line != "+OK\r\n" {
				return fmt.Errorf("SET %d: %q", i, strings.TrimSpace(line))
			}
		}
	}
	return nil
}

// loadEtcd puts the records, a Put each or per puts in a transaction,
// workers at once, then reads the member's status. Batched, each raft
// entry carries per records, and the entries etcd keeps in memory after
// its last snapshot (--snapshot-count, 10,000 by default, and 5,000 more
// for followers to catch up) then hold per times as many records: its RSS
// is not comparable to that of a Put each.
func loadEtcd(addr string, keys, vals [][]byte, workers, per int) (string, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 10 * time.Second})
	if err != nil {
		return "", err
	}
	defer c.Close()
	per = max(per, 1)
	txns := (len(keys) + per - 1) / per
	err = parallel(txns, workers, func(t int) error {
		if per == 1 {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := c.Put(ctx, string(keys[t]), string(vals[t]))
			return err
		}
		ops := make([]clientv3.Op, 0, per)
		for i := t * per; i < min((t+1)*per, len(keys)); i++ {
			ops = append(ops, clientv3.OpPut(string(keys[i]), string(vals[i])))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := c.Txn(ctx).Then(ops...).Commit()
		return err
	})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx, addr)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(" db_size=%d db_size_in_use=%d", st.DbSize, st.DbSizeInUse), nil
}

type item struct{ key, val []byte }

// loadGBTree builds a google/btree (degree 32, as blink's benchmarks)
// holding its own copies of the records, as a store would, and reports
// the heap it grew and the process's RSS with the tree alone left.
func loadGBTree(keys, vals [][]byte) string {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	t := gbtree.NewG[item](32, func(a, b item) bool { return bytes.Compare(a.key, b.key) < 0 })
	for i := range keys {
		t.ReplaceOrInsert(item{bytes.Clone(keys[i]), bytes.Clone(vals[i])})
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	heap := after.HeapAlloc - before.HeapAlloc
	// Drop the workload's copies and hand freed memory back, so that the
	// RSS is the tree's (and the runtime's).
	clear(keys)
	clear(vals)
	debug.FreeOSMemory()
	rss := rssBytes()
	runtime.KeepAlive(t)
	return fmt.Sprintf(" heap_bytes=%d rss_bytes=%d", heap, rss)
}

// rssBytes is this process's VmRSS.
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
