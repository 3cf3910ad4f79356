// Command cell-ycsb is go-ycsb's command line with only Cell's comparison
// bindings registered: cell, etcd and redis (packages db/...). It runs
// go-ycsb's core workload (github.com/pingcap/go-ycsb/pkg/workload) and
// measurement unchanged:
//
//	cell-ycsb load cell -P workloads/workloada -p recordcount=100000 -p cell.endpoints=127.0.0.1:2379
//	cell-ycsb run  cell -P workloads/workloada -p operationcount=100000 --threads 16
//
// It differs from go-ycsb's own main in what it registers (three
// bindings, not twenty: the module stays small), in having no "shell"
// command, and in serving pprof only when debug.pprof is given (go-ycsb
// always listens on :6060, every interface).
package main

import (
	"context"
	"fmt"
	"net/http"
	_ "net/http/pprof" // served only on debug.pprof
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand(ctx).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "cell-ycsb:", err)
		stop()
		os.Exit(1)
	}
}

// servePprof serves net/http/pprof on addr until the process ends.
func servePprof(addr string) {
	go func() {
		if err := http.ListenAndServe(addr, nil); err != nil {
			fmt.Fprintln(os.Stderr, "cell-ycsb: pprof:", err)
		}
	}()
}
