package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellstore/cell/internal/tlsconf"
)

// cellctl certs writes the CA and the three certificates, and refuses to
// overwrite the CA.
func TestCertsCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	var out, errb bytes.Buffer
	if code := run([]string{"certs", "--dir", dir, "--hosts", "localhost,10.0.0.1", "--valid-for", "1h"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, f := range []string{tlsconf.CAFile, tlsconf.CAKeyFile, tlsconf.ServerCertFile, tlsconf.ServerKeyFile, tlsconf.AdminCertFile, tlsconf.AdminKeyFile, tlsconf.ClientCertFile, tlsconf.ClientKeyFile, tlsconf.RootCertFile, tlsconf.RootKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	ca, err := os.ReadFile(filepath.Join(dir, tlsconf.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"certs", "--dir", dir}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "already holds a CA") {
		t.Fatalf("second run: exit %d, %q", code, errb.String())
	}
	if again, _ := os.ReadFile(filepath.Join(dir, tlsconf.CAFile)); !bytes.Equal(again, ca) {
		t.Fatal("the CA was overwritten")
	}
	if code := run([]string{"certs"}, &out, &errb); code == 0 {
		t.Fatal("certs without --dir succeeded")
	}
}
