package server

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cellstore/cell/wire"
)

// FuzzHandle feeds arbitrary ops and bodies to a worker of a live server:
// it must answer every one without panicking, and the tree must stay
// sound ("A server never crashes on what a client sends").
func FuzzHandle(f *testing.F) {
	s, _ := newTestServer(f, func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	root := s.Root()
	seeds := []struct {
		op  wire.Op
		msg wire.Message
	}{
		{wire.OpPut, &wire.PutRequest{Key: []byte("k"), Value: []byte("v")}},
		{wire.OpGet, &wire.GetRequest{Key: []byte("k")}},
		{wire.OpContains, &wire.GetRequest{Ptr: root, Key: []byte("k")}},
		{wire.OpDelete, &wire.DeleteRequest{Key: []byte("k")}},
		{wire.OpSearch, &wire.SearchRequest{Key: []byte("k"), WantValue: true}},
		{wire.OpRange, &wire.RangeRequest{StartUnbounded: true, EndUnbounded: true, Limit: 3}},
		{wire.OpRange, &wire.RangeRequest{Start: []byte("a"), End: []byte("z"), Reverse: true}},
		{wire.OpNodeDump, &wire.NodeDumpRequest{Ptr: root}},
		{wire.OpMetadata, &wire.MetadataRequest{WantMeganodes: true}},
	}
	for _, sd := range seeds {
		f.Add(uint8(sd.op), sd.msg.AppendTo(nil))
	}
	f.Cleanup(func() {
		if err := rootTree(f, s).CheckErr(); err != nil {
			f.Error(err)
		}
	})
	var mu sync.Mutex
	w := newWorker(s)
	f.Fuzz(func(t *testing.T, op uint8, body []byte) {
		mu.Lock()
		defer mu.Unlock()
		w.cur = job{f: wire.Frame{Header: wire.Header{Op: wire.Op(op)}}, arrived: time.Now()}
		w.job = &w.cur
		out := w.handle(wire.Op(op), body)
		w.job, w.cur = nil, job{}
		msg, err := out.msg, out.err
		if out.proposed {
			// The write's outcome, as settleWrite waits for it.
			_, err = out.p.rep.settle(out.p.f)
		}
		if err == nil && msg != nil {
			_ = msg.AppendTo(nil) // the reply encodes
		}
		if err != nil && wire.StatusOf(wireError(err)) == wire.StatusInternal {
			t.Fatalf("op %v: internal error %v", wire.Op(op), err)
		}
		w.resetLarge()
	})
}
