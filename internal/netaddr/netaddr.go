// Package netaddr holds what Cell's listeners share about their peers'
// addresses.
package netaddr

import "net"

// Host is the IP address of a connection's peer, as per-host limits count
// it (its whole address when it has no host part; "" without one).
func Host(nc net.Conn) string {
	a := nc.RemoteAddr()
	if a == nil {
		return ""
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
