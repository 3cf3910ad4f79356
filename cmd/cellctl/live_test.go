package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// Tests against the shared in-process cluster (cluster_helper_test.go).

// dump node root dumps the tree's root node, as dump meganode root finds
// the root meganode.
func TestDumpNodeRoot(t *testing.T) {
	code, out, errs := runAt(t, "", "dump", "meganode", "root", "-w", "json")
	var md meganodeDump
	if err := json.Unmarshal([]byte(out), &md); code != 0 || err != nil {
		t.Fatalf("dump meganode root: exit %d, %v, stderr %q", code, err, errs)
	}
	code, out, errs = runAt(t, "", "dump", "node", "root")
	if code != 0 || errs != "" || !strings.HasPrefix(out, "node "+md.Root+" (copy ok)\n") {
		t.Fatalf("dump node root: exit %d, stderr %q, stdout %q; want node %s", code, errs, out, md.Root)
	}
	code, out2, _ := runAt(t, "", "dump", "node", md.Root)
	if code != 0 || out2 != out {
		t.Errorf("dump node %s: exit %d\n%s\nwant\n%s", md.Root, code, out2, out)
	}
}
