package main

import (
	"testing"

	"github.com/cellstore/cell/internal/tlsconf"
)

// TestParseEtcdUsers: --user's CN=role entries, with and without the
// development users; root and malformed entries refused.
func TestParseEtcdUsers(t *testing.T) {
	u, err := parseEtcdUsers([]string{"node1.example.com=server", " app1 = cell-client ", ""}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]tlsconf.Role{"cell-server": tlsconf.RoleServer, "cell-admin": tlsconf.RoleAdmin, "cell-client": tlsconf.RoleClient,
		"node1.example.com": tlsconf.RoleServer, "app1": tlsconf.RoleClient}
	if len(u) != len(want) {
		t.Fatalf("users %v, want %v", u, want)
	}
	for k, v := range want {
		if u[k] != v {
			t.Errorf("user %s: %v, want %v", k, u[k], v)
		}
	}
	if u, err := parseEtcdUsers([]string{"ops=admin"}, false); err != nil || len(u) != 1 || u["ops"] != tlsconf.RoleAdmin {
		t.Fatalf("without dev users: %v, %v", u, err)
	}
	for _, bad := range [][]string{{"root=admin"}, {"node1"}, {"=server"}, {"x=superuser"}, nil} {
		if _, err := parseEtcdUsers(bad, false); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
