package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/cellstore/cell/regiontable"
)

func TestOptionsDefaults(t *testing.T) {
	o := Options{DataDir: "d", Store: regiontable.NewMemory(), HostID: "h"}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Listen != DefaultListen || o.RDMAListen != DefaultRDMAListen || o.MetricsListen != "" || o.Cores != 1 ||
		o.RegionSize != 1<<30 || o.MeganodeSize != 64<<20 || o.NodeSize != 1024 || o.QueueDepth != DefaultQueueDepth ||
		o.Registry == nil || o.Logger == nil || o.ServerID == "" {
		t.Fatalf("defaults %+v", o)
	}
	if err := regiontable.ValidServerID(o.ServerID); err != nil || !strings.HasSuffix(o.ServerID, "-127.0.0.1-7070") {
		t.Fatalf("default server ID %q: %v", o.ServerID, err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for name, edit := range map[string]func(*Options){
		"no data dir":      func(o *Options) { o.DataDir = "" },
		"no store":         func(o *Options) { o.Store = nil },
		"cores":            func(o *Options) { o.Cores = -1 },
		"node size":        func(o *Options) { o.NodeSize = 1000 },
		"meganode size":    func(o *Options) { o.MeganodeSize = 1500 },
		"tiny meganode":    func(o *Options) { o.MeganodeSize = 4096 },
		"server id":        func(o *Options) { o.ServerID = "a b" },
		"listen":           func(o *Options) { o.Listen = "nonsense" },
		"metrics listen":   func(o *Options) { o.MetricsListen = "nonsense" },
		"queue":            func(o *Options) { o.QueueDepth = -3 },
		"frame size":       func(o *Options) { o.MaxFrameSize = 100 },
		"hugepages":        func(o *Options) { o.Hugepages = 9 },
		"range pairs":      func(o *Options) { o.MaxRangePairs = -1 },
		"negative timeout": func(o *Options) { o.WriteTimeout = -1 },
	} {
		o := Options{DataDir: "d", Store: regiontable.NewMemory(), HostID: "h"}
		edit(&o)
		o.EnsureDefaults()
		if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
		if _, err := New(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New with %s: %v", name, err)
		}
	}
}

func TestDefaultServerID(t *testing.T) {
	for _, l := range []string{"127.0.0.1:7070", "[::1]:7070", ":7070", strings.Repeat("x", 300)} {
		if err := regiontable.ValidServerID(DefaultServerID(l)); err != nil {
			t.Errorf("DefaultServerID(%q) = %q: %v", l, DefaultServerID(l), err)
		}
	}
	if DefaultServerID("127.0.0.1:7070") == DefaultServerID("127.0.0.1:7080") {
		t.Fatal("servers on one host with different ports get one ID")
	}
}
