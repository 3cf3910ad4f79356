package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// refusedProbeTimeout bounds refused's dials.
const refusedProbeTimeout = time.Second

// refused returns an error at once when every etcd endpoint refuses TCP
// connections: nothing listens there (no server started, or the wrong
// --endpoints), and the etcd client would only try again until
// --dial-timeout to say the same in a longer way. Anything else (a
// connection, a timeout, an unreachable network) returns nil and leaves
// the wait and the diagnosis to the etcd client.
func refused(eps []string, dialTimeout time.Duration) error {
	addrs := make([]string, len(eps))
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		addrs[i] = hostPort(ep)
		wg.Go(func() {
			d := net.Dialer{Timeout: min(dialTimeout, refusedProbeTimeout)}
			c, err := d.Dial("tcp", addrs[i])
			if err == nil {
				_ = c.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
	}
	return fmt.Errorf("etcd at %s: connection refused: is a cellserver running? (--endpoints names the cluster's etcd)", strings.Join(addrs, ", "))
}

// hostPort is the host:port of an etcd endpoint given as one or as a URL
// (http://host:port, https://host:port).
func hostPort(ep string) string {
	if strings.Contains(ep, "://") {
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			return u.Host
		}
	}
	return ep
}
