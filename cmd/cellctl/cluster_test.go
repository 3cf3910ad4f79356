package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/regiontable"
)

// clusterOf turns a cluster view into a collected cluster, with s3 a
// member that did not answer.
func clusterOf(v clusterView) *cluster {
	cl := &cluster{table: regiontable.State{Root: v.Root, Members: v.Members, Regions: v.Regions}}
	for _, s := range v.Servers {
		cl.servers = append(cl.servers, memberMeta{member: regiontable.Member{ID: s.ID}, meta: s.Meta})
	}
	cl.table.Members = append(cl.table.Members, regiontable.Member{ID: "s3"})
	cl.servers = append(cl.servers, memberMeta{member: regiontable.Member{ID: "s3"}, err: errors.New("server 127.0.0.1:1: connection\nrefused")})
	return cl
}

func TestMeganodesOutput(t *testing.T) {
	v := goodCluster()
	s1 := v.Servers[0].Meta
	s1.NodeSize = 1024
	s1.Meganodes[2] = withSplit(mega(ptrC, 0, "p", "t", ptrY), true, false)
	s1.Meganodes[2].SplitLinked = true
	s1.Meganodes = append(s1.Meganodes, withSplit(mega(ptrY, 0, "t", "", 0), false, true))
	res := meganodesOutput(clusterOf(v))
	var order []string
	for _, m := range res.Meganodes {
		order = append(order, m.Ptr)
	}
	// The tree's order: the root, then level 0 by min key.
	if got := strings.Join(order, " "); got != "1:0x1000 1:0x2000 2:0x1000 1:0x3000 1:0x4000" {
		t.Fatalf("order %s", got)
	}
	if res.Levels != 2 || res.Root != "1:0x1000" || !res.Meganodes[0].Root || res.Meganodes[1].Root ||
		res.Meganodes[2].Host != "s2" || res.Meganodes[1].Right != "2:0x1400" || res.Meganodes[0].Right != "nil" ||
		res.Meganodes[3].Split != "source, linked" || res.Meganodes[4].Split != "target" || len(res.Errors) != 1 {
		t.Fatalf("meganodes %+v", res)
	}
	out := squeeze(render(t, []*table{meganodesTable(res)}))
	for _, want := range []string{
		"Meganodes (root 1:0x1000, 2 levels, 5 meganodes; 1KiB nodes, 4KiB meganodes)",
		"MEGANODE  LEVEL  HEIGHT  MIN  MAX  NODES  FILL  HOST  RIGHT  NOTE",
		"1:0x1000  1  2  -inf  +inf  2/4  50.0%  s1  nil  root",
		"1:0x2000  0  2  -inf  g  2/4  50.0%  s1  2:0x1400  -",
		"1:0x3000  0  2  p  t  2/4  50.0%  s1  1:0x4000  split source, linked",
		"1:0x4000  0  2  t  +inf  2/4  50.0%  s1  nil  split target",
		"error: s3: server 127.0.0.1:1: connection refused",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("meganodes table lacks %q:\n%s", want, out)
		}
	}
	js, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Levels    int
		Meganodes []struct {
			Ptr, Host, Right, Min, Max string
			Level                      int
			Root                       bool
		}
	}
	if err := json.Unmarshal(js, &back); err != nil || back.Levels != 2 || len(back.Meganodes) != 5 ||
		back.Meganodes[0].Ptr != "1:0x1000" || !back.Meganodes[0].Root || back.Meganodes[1].Max != "g" || back.Meganodes[2].Host != "s2" {
		t.Fatalf("meganodes JSON %s: %v", js, err)
	}
}

func TestMembersAndRegionsOutput(t *testing.T) {
	st := regiontable.State{
		Members: []regiontable.Member{{ID: "s1", RPCAddr: "10.0.0.1:7070", ReadAddr: "10.0.0.1:7071", HostID: "h1", Version: "v1"}, {ID: "s2", RPCAddr: "10.0.0.2:7070"}},
		Regions: []regiontable.Region{{ID: 1, Kind: regiontable.KindData, Size: 1 << 30, Host: "s1", Epoch: 3, Term: 7, Replicas: []string{"s1", "s2"}},
			{ID: 4, Kind: regiontable.KindData, Size: 64 << 20, Host: "gone", Epoch: 1},
			{ID: 5, Kind: regiontable.KindData, Size: 64 << 20, Host: "s2", Epoch: 2, Term: 3, Replicas: []string{"s1", "s2", "s3"}, Learners: []string{"s4"}}},
		Draining: []string{"s2"},
		Missing:  map[string]time.Duration{"s3": 12*time.Second + 400*time.Millisecond},
	}
	out := squeeze(render(t, []*table{membersTable(membersOutput(st.Members, st.Draining))}))
	for _, want := range []string{"MEMBER  RPC ADDRESS  READ ADDRESS  HOST  VERSION  DRAINING", "s1  10.0.0.1:7070  10.0.0.1:7071  h1  v1  no", "s2  10.0.0.2:7070  -  -  yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("members table lacks %q:\n%s", want, out)
		}
	}
	rs := regionsOutput(st)
	if len(rs) != 3 || !rs[0].Live || rs[1].Live || rs[1].Kind != "data" {
		t.Fatalf("regions %+v", rs)
	}
	out = squeeze(render(t, []*table{regionsTable(rs)}))
	for _, want := range []string{"REGION  KIND  SIZE  LEADER  TERM  EPOCH  REPLICAS  LIVE", "1  data  1GiB  s1  7  3  s1,s2  yes", "4  data  64MiB  gone  0  1  -  no", "1 of 3 regions is hosted by no live member.",
		"5  data  64MiB  s2  3  2  s1,s2,s3! +s4!  yes", "1 region has replicas on servers that are not live members (marked !)",
		"s3: missing for 12s by the coordinator's count."} {
		if !strings.Contains(out, want) {
			t.Errorf("regions table lacks %q:\n%s", want, out)
		}
	}
	if js, _ := json.Marshal(rs[2]); !strings.Contains(string(js), `"down_replicas":["s3","s4"],"missing_for":{"s3":"12s"}`) {
		t.Errorf("region 5 JSON: %s", js)
	}
	if js, _ := json.Marshal(membersOutput(nil, nil)); string(js) != "[]" {
		t.Errorf("no members: %s", js)
	}
}
