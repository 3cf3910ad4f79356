package netaddr

import (
	"net"
	"testing"
)

func TestHost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.7")}}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := Host(s); got != "127.0.0.7" {
		t.Errorf("Host = %q, want 127.0.0.7", got)
	}
	a, b := net.Pipe() // addresses with no host part
	defer a.Close()
	defer b.Close()
	if got := Host(a); got != "pipe" {
		t.Errorf("Host(pipe) = %q, want its whole address", got)
	}
}
