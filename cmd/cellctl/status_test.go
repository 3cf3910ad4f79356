package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cellstore/cell/wire"
)

// TestStatusListsEveryServedRegion: a server serving several regions (its
// own and those it took over) shows a row for each, not only the first.
func TestStatusListsEveryServedRegion(t *testing.T) {
	res := statusResult{Root: "1:0x1000", Servers: []serverStatus{
		{ID: "s1", RPCAddr: "127.0.0.1:7070", Regions: []regionStatus{
			{ID: 1, Epoch: 1, Size: 1 << 30, Raft: raftStatus{Role: wire.RoleLeader, Term: 2, Applied: 10, Commit: 10}},
			{ID: 4, Epoch: 3, Size: 1 << 30, Raft: raftStatus{Role: wire.RoleLeader, Term: 5, Applied: 7, Commit: 9}},
		}},
		{ID: "s2", RPCAddr: "127.0.0.1:7170"},
	}}
	var out bytes.Buffer
	if err := statusTables(res)[0].write(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	var rows [][]string
	for _, l := range lines[2:] { // title, header
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(l, " ") { // notes are not indented
			rows = append(rows, f)
		}
	}
	if len(rows) != 3 {
		t.Fatalf("want 3 rows (s1's two regions, s2), got %d:\n%s", len(rows), out.String())
	}
	if rows[1][0] != "4" || rows[1][1] != "3" || rows[1][len(rows[1])-1] != "2" {
		t.Errorf("second region row %q, want region 4, epoch 3, ..., lag 2:\n%s", rows[1], out.String())
	}
}
