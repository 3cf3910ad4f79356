package test

import (
	"strings"
	"testing"
	"time"
)

// TestComposeTLS brings up the compose cluster's TLS variant
// (docker-compose.tls.yml over docker-compose.yml: every port of every
// container on TLS with client certificates required) and works it from
// the client container, whose cellctl holds the admin certificate: the
// regions replicate three ways (raft over TLS), a put and a get go through
// (RPC and etcd over TLS), one-sided reads over the tcp responder (TLS)
// serve a short bench, cellctl check finds every replica equal, etcd's
// roles (turned on by the servers) let a client certificate read the
// region table but not write it, and a killed leader's keys are served
// again by another replica. Skipped
// without docker, as the other compose tests.
func TestComposeTLS(t *testing.T) {
	c := composeUpTLS(t, "CELL_RAFT_HEARTBEAT_TIMEOUT=300ms")
	store := c.Table(t)
	waitReplicated(t, store, 3)

	c.Cellctl(t, "put", "tls-key", "tls-value")
	if out := c.Cellctl(t, "get", "tls-key"); !strings.Contains(out, "tls-value") {
		t.Fatalf("get over TLS: %q", out)
	}
	out := c.Cellctl(t, "bench", "--workload", "get", "--provider", "tcp", "--mode", "client", "--keys", "200",
		"--clients", "1", "--warmup", "0s", "--duration", "1s", "--no-progress")
	if !strings.Contains(out, "client-side") || strings.Contains(out, " 0 client-side") {
		t.Fatalf("one-sided reads over TLS:\n%s", out)
	}
	c.Cellctl(t, "check")

	// etcd refuses a client without a certificate (cellctl with the CA
	// only): the region table is as closed as the servers.
	code, stdout, stderr := c.Exec(t, c.Client, "cellctl", "--cert", "", "--key", "", "--dial-timeout", "2s", "members")
	if code == 0 {
		t.Fatalf("cellctl without a client certificate read the members: %s", stdout)
	}
	t.Logf("without a client certificate: exit %d: %s", code, strings.TrimSpace(stderr))

	root, err := store.Root(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	e, err := store.Region(t.Context(), root.Region())
	if err != nil {
		t.Fatal(err)
	}
	// The servers turned etcd's roles on: a client certificate reads the
	// table but cannot write it (a drain mark), the admin's can.
	asClient := []string{"cellctl", "--cert", "/certs/client.crt", "--key", "/certs/client.key", "--dial-timeout", "5s"}
	if code, stdout, stderr := c.Exec(t, c.Client, append(asClient, "members")...); code != 0 {
		t.Fatalf("cellctl members with a client certificate: exit %d: %s %s", code, stdout, stderr)
	}
	code, stdout, stderr = c.Exec(t, c.Client, append(asClient, "drain", "--undo", e.Host)...)
	if code == 0 || !strings.Contains(stdout+stderr, "permission denied") {
		t.Fatalf("drain with a client certificate: exit %d: %s %s; want etcd's permission denied", code, stdout, stderr)
	}
	c.Cellctl(t, "drain", "--undo", e.Host)

	// Kill the host of the region of tls-key; another replica serves it.
	c.Kill(t, e.Host)
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out, _ := c.Exec(t, c.Client, "cellctl", "get", "tls-key")
		if code == 0 && strings.Contains(out, "tls-value") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tls-key not served 60 s after %s was killed: %s", e.Host, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	c.Start(t, e.Host)
	c.WaitHealthy(t, e.Host, 90*time.Second)
	waitReplicated(t, store, 3)
	c.Cellctl(t, "check")
}
