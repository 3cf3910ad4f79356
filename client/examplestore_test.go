package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/cellstore/cell/meganode"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/regiontable/embedded"
	"github.com/cellstore/cell/server"
)

// startExampleStore starts what `go run ./cmd/cellserver` starts, for one
// example: an embedded etcd and a single server publishing in it, on free
// loopback ports, with a small region in a plain file (no hugepages, no
// /dev/shm) under a temporary directory. It returns the etcd endpoints a
// client is given and a function that stops everything and removes the
// directory. It panics on failure: examples have no *testing.T.
func startExampleStore() (endpoints []string, stop func()) {
	dir, err := os.MkdirTemp("", "cell-example-")
	if err != nil {
		panic(err)
	}
	var closers []func()
	stop = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		_ = os.RemoveAll(dir)
	}
	fail := func(what string, err error) {
		stop()
		panic(fmt.Sprintf("example store: %s: %v", what, err))
	}
	quiet := slog.New(slog.DiscardHandler)

	var e *embedded.Etcd
	for range 3 { // a free port may be taken before etcd listens on it
		e, err = embedded.Start(embedded.Options{
			Dir: dir + "/etcd", ClientAddr: freeAddr(), PeerAddr: freeAddr(), Logger: quiet,
		})
		if err == nil {
			break
		}
	}
	if err != nil {
		fail("start etcd", err)
	}
	closers = append(closers, func() { _ = e.Close() })

	store, err := regiontable.OpenEtcd(e.Endpoints(), regiontable.EtcdOptions{Logger: quiet})
	if err != nil {
		fail("open the region table", err)
	}
	closers = append(closers, func() { _ = store.Close() })

	// The shm registration table goes in dir too, not in /dev/shm.
	if err := os.Mkdir(dir+"/shm", 0o700); err != nil {
		fail("make the shm directory", err)
	}
	s, err := server.New(server.Options{
		DataDir:      dir + "/data",
		Listen:       "127.0.0.1:0",
		RDMAListen:   "127.0.0.1:0",
		RaftListen:   "127.0.0.1:0",
		Store:        store,
		ServerID:     "s1",
		RegionSize:   32 << 20,
		MeganodeSize: 4 << 20,
		NodeSize:     512,
		Hugepages:    meganode.HugepagesOff,
		ShmDir:       dir + "/shm",
		Logger:       quiet,
	})
	if err != nil {
		fail("new server", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		fail("start the server", err)
	}
	closers = append(closers, func() { _ = s.Close() })
	return e.Endpoints(), stop
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
