package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/locality"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
	"github.com/cellstore/cell/wire/wiretest"
)

// Bad input against the real server: oversized keys and values (typed
// errors from the client and from the server), malformed and oversized
// frames on raw TCP (an error status where the stream is still in sync, a
// closed connection where it is not), one-sided reads with a wrong region
// key or out of bounds (typed errors from the tcp responder). Nothing is
// lost, the server keeps serving on old and new connections, and stops
// cleanly at the end.
func TestBadInput(t *testing.T) {
	srv := startServer(t, serverOptions{cores: 1})
	c := srv.newClient(t, func(c *client.Config) { c.Provider = client.ProviderTCP })
	keep := map[string]string{}
	for i := range 200 {
		k, v := fmt.Sprintf("keep/%03d", i), fmt.Sprintf("value %d %s", i, strings.Repeat("v", i))
		mustPut(t, c, k, v)
		keep[k] = v
	}
	checkKept := func(t *testing.T, c *client.Client) {
		t.Helper()
		for k, v := range keep {
			mustGet(t, c, k, v)
		}
		if !srv.alive() {
			t.Fatal("cellserver exited")
		}
	}

	t.Run("client limits", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		long, max := bytes.Repeat([]byte("k"), 129), bytes.Repeat([]byte("k"), 128)
		for name, err := range map[string]error{
			"put long key":      c.Put(ctx, long, []byte("v")),
			"delete long key":   c.Delete(ctx, long),
			"put huge value":    c.Put(ctx, []byte("big"), make([]byte, wire.MaxValueSize+1)),
			"put empty key":     c.Put(ctx, nil, []byte("v")),
			"get long key":      errOf(c.Get(ctx, long)),
			"contains long key": errOf(c.Contains(ctx, long)),
		} {
			var want error
			switch {
			case strings.Contains(name, "long key"):
				want = client.ErrKeyTooLarge
			case strings.Contains(name, "huge"):
				want = client.ErrValueTooLarge
			default:
				want = client.ErrEmptyKey
			}
			if !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", name, err, want)
			}
		}
		// The limits themselves are fine.
		if err := c.Put(ctx, max, make([]byte, wire.MaxValueSize)); err != nil {
			t.Fatalf("largest key and value: %v", err)
		}
		if v, err := c.Get(ctx, max); err != nil || len(v) != wire.MaxValueSize {
			t.Fatalf("get of the largest value: %d bytes, %v", len(v), err)
		}
	})

	t.Run("server limits", func(t *testing.T) {
		// Past the client's checks, straight to the server.
		wc := dialWire(t, srv)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		long := bytes.Repeat([]byte("k"), 129)
		for _, tc := range []struct {
			name string
			op   wire.Op
			req  wire.Message
			want error
		}{
			{"put long key", wire.OpPut, &wire.PutRequest{Key: long, Value: []byte("v")}, wire.ErrKeyTooLarge},
			{"get long key", wire.OpGet, &wire.GetRequest{Key: long}, wire.ErrKeyTooLarge},
			{"search long key", wire.OpSearch, &wire.SearchRequest{Key: long}, wire.ErrKeyTooLarge},
			{"put huge value", wire.OpPut, &wire.PutRequest{Key: []byte("big"), Value: make([]byte, wire.MaxValueSize+1)}, wire.ErrValueTooLarge},
			{"put empty key", wire.OpPut, &wire.PutRequest{Value: []byte("v")}, wire.ErrEmptyKey},
			{"get in an unknown region", wire.OpGet, &wire.GetRequest{Ptr: 4242 << 40, Key: []byte("keep/001")}, wire.ErrUnknownRegion},
			{"node dump out of bounds", wire.OpNodeDump, &wire.NodeDumpRequest{Ptr: 1<<40 | (1<<40 - 1024)}, wire.ErrOutOfBounds},
			{"node dump misaligned", wire.OpNodeDump, &wire.NodeDumpRequest{Ptr: 1<<40 | 4099}, wire.ErrOutOfBounds},
			{"stale epoch", wire.OpGet, &wire.GetRequest{Key: []byte("keep/001"), Epoch: 9999}, wire.ErrStaleEpoch},
		} {
			f, err := wc.CallMessage(ctx, tc.op, tc.req)
			if err == nil {
				f.Release()
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
		}
		// The connection is still good.
		f, err := wc.Call(ctx, wire.OpPing, []byte("still there"))
		if err != nil || string(f.Body) != "still there" {
			t.Fatalf("ping after refused requests: %q, %v", f.Body, err)
		}
		f.Release()
	})

	t.Run("frames in sync", func(t *testing.T) {
		r := wiretest.Dial(t, srv.rpc)
		good := (&wire.GetRequest{Key: []byte("keep/007")}).AppendTo(nil)
		r.SendFrame(wire.OpGet, 1, []byte{1, 2, 3}) // truncated body
		r.Expect(1, wire.StatusBadRequest)
		r.SendFrame(wire.OpGet, 2, append(bytes.Clone(good), 0)) // trailing byte
		r.Expect(2, wire.StatusBadRequest)
		bad := (&wire.PutRequest{Key: []byte("k"), Value: []byte("v")}).AppendTo(nil)
		binary.LittleEndian.PutUint32(bad[32:], 1<<31) // a key length past the body
		r.SendFrame(wire.OpPut, 3, bad)
		r.Expect(3, wire.StatusBadRequest)
		r.SendFrame(0x99, 4, []byte("unknown op"))
		r.Expect(4, wire.StatusUnknownOp)
		r.Send(wire.AppendFrame(nil, wire.Header{Op: wire.OpGet, ID: 5, Flags: wire.FlagReply}, good)) // a reply as a request
		r.Expect(5, wire.StatusBadRequest)
		// Over the frame limit (4 MiB + 32): the body is skipped, the
		// stream stays in sync.
		r.SendFrame(wire.OpPut, 6, make([]byte, wire.DefaultMaxFrameSize-wire.HeaderSize+1))
		r.Expect(6, wire.StatusFrameTooLarge)
		r.SendFrame(wire.OpGet, 7, good)
		h, body := r.Reply()
		var gr wire.GetReply
		if h.ID != 7 || h.Status != wire.StatusOK || gr.Decode(body) != nil || string(gr.Value) != keep["keep/007"] {
			t.Fatalf("get after malformed frames: %+v %q", h, body)
		}
	})

	t.Run("corrupt streams", func(t *testing.T) {
		badMagic := wire.AppendFrame(nil, wire.Header{Op: wire.OpPing, ID: 1}, nil)
		badMagic[4] = 0
		short := wire.AppendFrame(nil, wire.Header{Op: wire.OpPing, ID: 1}, nil)
		binary.LittleEndian.PutUint32(short, 8)
		huge := wire.AppendFrame(nil, wire.Header{Op: wire.OpPing, ID: 1}, nil)
		binary.LittleEndian.PutUint32(huge, 0xffffffff) // oversized, and never sent
		for name, frame := range map[string][]byte{
			"bad magic":           badMagic,
			"length below header": short,
			"http":                []byte(strings.Repeat("GET / HTTP/1.1\r\n", 4)),
			"truncated":           wire.AppendFrame(nil, wire.Header{Op: wire.OpGet, ID: 1}, make([]byte, 100))[:60],
			"oversized, cut off":  huge,
		} {
			t.Run(name, func(t *testing.T) {
				r := wiretest.Dial(t, srv.rpc)
				r.Ping(100)
				r.Send(frame)
				if name == "truncated" || name == "oversized, cut off" {
					_ = r.NC.(*net.TCPConn).CloseWrite()
				}
				r.ExpectClosed()
			})
		}
		t.Run("bad version", func(t *testing.T) {
			r := wiretest.Dial(t, srv.rpc)
			f := wire.AppendFrame(nil, wire.Header{Op: wire.OpPing, ID: 42}, nil)
			f[5] = 9
			r.Send(f)
			r.Expect(42, wire.StatusBadVersion)
			r.ExpectClosed()
		})
		// Other connections did not notice.
		wiretest.Dial(t, srv.rpc).Ping(1)
	})

	t.Run("one-sided reads", func(t *testing.T) {
		rk := tcpRemoteKey(t, srv)
		rc, err := rdma.NewTCPClient(rdma.TCPClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		buf := make([]byte, 1024)
		if err := rc.Read(ctx, &rk, 4096, buf); err != nil { // the root meganode's header
			t.Fatalf("read: %v", err)
		}
		wrongKey, wrongRegion, longer, huge := rk, rk, rk, rk
		wrongKey.Key ^= 0x5a5a
		wrongRegion.Region++
		// Lengths the client believes, so that it lets the reads through
		// and the responder has to check.
		longer.Len *= 2
		huge.Len = 1 << 40
		for _, tc := range []struct {
			name string
			rk   *rdma.RemoteKey
			off  uint64
			n    int
			want error
		}{
			{"wrong key", &wrongKey, 4096, 1024, rdma.ErrBadKey},
			{"wrong region", &wrongRegion, 4096, 1024, rdma.ErrBadKey},
			{"past the end", &longer, rk.Len, 1024, rdma.ErrOutOfBounds},
			{"across the end", &longer, rk.Len - 512, 1024, rdma.ErrOutOfBounds},
			{"far out", &huge, 1<<40 - 8, 8, rdma.ErrOutOfBounds},
		} {
			if err := rc.Read(ctx, tc.rk, tc.off, make([]byte, tc.n)); !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
		}
		if err := rc.Read(ctx, &rk, 4093, make([]byte, 8)); !errors.Is(err, rdma.ErrMisaligned) {
			t.Errorf("misaligned: %v", err)
		}
		// The same client, and its connection, still read.
		again := make([]byte, 1024)
		if err := rc.Read(ctx, &rk, 4096, again); err != nil {
			t.Fatalf("read after refused reads: %v", err)
		}
		// The responder refused them (they were not caught by the client).
		m := scrape(t, srv)
		for cause, min := range map[string]float64{"bad_key": 2, "out_of_bounds": 3} {
			if v := m.value("cell_server_onesided_rejected_total", "cause", cause); v < min {
				t.Errorf("responder rejected %v reads for %s, want >= %v", v, cause, min)
			}
		}
		// Garbage on the responder's port closes that connection only.
		nc, err := net.Dial("tcp", srv.rdma)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := nc.Write(bytes.Repeat([]byte("not a read request "), 10)); err != nil {
			t.Fatal(err)
		}
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(nc); err != nil && !isReset(err) {
			t.Fatalf("responder connection after garbage: %v", err)
		}
		if err := rc.Read(ctx, &rk, 4096, again); err != nil {
			t.Fatalf("read after garbage on another connection: %v", err)
		}
	})

	// Nothing was lost; the server serves old and new clients.
	checkKept(t, c)
	checkKept(t, srv.newClient(t, func(c *client.Config) { c.Mode = locality.Mode{Kind: locality.ClientOnly} }))
	m := scrape(t, srv)
	for _, kind := range []string{"too_large", "unknown_op", "bad_version", "corrupt", "not_a_request"} {
		if v := m.value("cell_server_malformed_frames_total", "kind", kind); v < 1 {
			t.Errorf("malformed frames of kind %s counted %v times", kind, v)
		}
	}
}

func errOf[T any](_ T, err error) error { return err }

// dialWire opens a wire connection to the server, closed with the test.
func dialWire(t *testing.T, srv *cellServer) *wire.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := wire.Dial(ctx, srv.rpc, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// tcpRemoteKey returns the tcp registration of the server's region, from
// the region table.
func tcpRemoteKey(t *testing.T, srv *cellServer) rdma.RemoteKey {
	t.Helper()
	store, err := regiontable.OpenEtcd([]string{srv.etcd}, regiontable.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	regions, err := store.Regions(ctx)
	if err != nil || len(regions) != 1 {
		t.Fatalf("regions %+v, %v", regions, err)
	}
	raw, ok := regions[0].ReadKeyFor(rdma.ProviderTCP)
	if !ok {
		t.Fatalf("region %+v has no tcp key", regions[0])
	}
	var rk rdma.RemoteKey
	if err := json.Unmarshal(raw, &rk); err != nil {
		t.Fatal(err)
	}
	return rk
}

// metrics are a scrape of a server's /metrics: sample lines by name.
type metrics map[string][]string

func scrape(t *testing.T, srv *cellServer) metrics {
	t.Helper()
	resp, err := http.Get("http://" + srv.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m := metrics{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		m[name] = append(m[name], line)
	}
	return m
}

// value sums the samples of name whose label has value v.
func (m metrics) value(name, label, v string) float64 {
	sum := 0.0
	for _, line := range m[name] {
		if !strings.Contains(line, label+`="`+v+`"`) {
			continue
		}
		f := strings.Fields(line)
		x, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += x
		}
	}
	return sum
}

// isReset reports a connection error from the peer closing or resetting.
func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe)
}
