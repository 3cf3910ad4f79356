package rdma

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// The fabric provider's formats and rules that need no libfabric: they
// run in every build.

func TestFabricDescRoundTrip(t *testing.T) {
	d := fabricDesc{provider: "tcp;ofi_rxm", addr: "\x02\x00\x1f\x90\x7f\x00\x00\x01", key: 0xdeadbeef, base: 0x7f0000001000,
		tableKey: 42, tbase: 0x7f0000400000, incarnation: 1 << 63}
	got, err := parseFabricDesc(d.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got != d {
		t.Fatalf("round trip: got %+v, want %+v", got, d)
	}
	if !strings.HasPrefix(d.encode(), "f1|tcp;ofi_rxm|02001f907f000001|deadbeef|") {
		t.Fatalf("text form %q", d.encode())
	}
}

func TestFabricDescRejects(t *testing.T) {
	good := fabricDesc{provider: "shm", addr: "fi_shm://1", key: 1, tableKey: 2, incarnation: 3}.encode()
	for _, bad := range []string{
		"", "f1", "f2" + good[2:], strings.Replace(good, "|shm|", "||", 1),
		good + "|1", strings.TrimSuffix(good, "|3"),
		strings.Replace(good, "|1|", "|xyz|", 1), // bad key
		strings.TrimSuffix(good, "3") + "0",      // no incarnation
		"f1|shm|zz|1|0|2|0|3",                    // bad hex address
		"f1|shm||1|0|2|0|3",                      // empty address
		"f1|shm|" + strings.Repeat("00", maxFabricAddr+1) + "|1|0|2|0|3",
		"f1|shm|00|1|0|2|0|10000000000000000", // overflows 64 bits
	} {
		if _, err := parseFabricDesc(bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("parse %q: got %v, want ErrBadKey", bad, err)
		}
	}
}

func TestClockFrames(t *testing.T) {
	b := make([]byte, fabricMsgBuffer)
	n := encodeClockRequest(b, 77, "addr-bytes")
	nonce, addr, ok := decodeClockRequest(b[:n])
	if !ok || nonce != 77 || addr != "addr-bytes" {
		t.Fatalf("request: %d %q %v", nonce, addr, ok)
	}
	for _, cut := range []int{0, 4, clockHeader, n - 1} {
		if _, _, ok := decodeClockRequest(b[:cut]); ok {
			t.Errorf("request cut to %d bytes accepted", cut)
		}
	}
	if _, _, ok := decodeClockRequest(append(b[:n:n], 0)); ok {
		t.Error("request with a trailing byte accepted")
	}
	n = encodeClockReply(b, 77, -5, 9)
	nonce, now, inc, ok := decodeClockReply(b[:n])
	if !ok || nonce != 77 || now != -5 || inc != 9 {
		t.Fatalf("reply: %d %d %d %v", nonce, now, inc, ok)
	}
	b[4] = clockRequest
	if _, _, _, ok := decodeClockReply(b[:n]); ok {
		t.Error("a request decoded as a reply")
	}
}

func FuzzClockFrames(f *testing.F) {
	b := make([]byte, fabricMsgBuffer)
	f.Add(b[:encodeClockRequest(b, 1, "x")])
	f.Add(b[:encodeClockReply(b, 1, 2, 3)])
	f.Fuzz(func(t *testing.T, msg []byte) {
		if nonce, addr, ok := decodeClockRequest(msg); ok {
			out := make([]byte, clockMsgMax)
			if n := encodeClockRequest(out, nonce, addr); string(out[:n]) != string(msg) {
				t.Fatalf("request %x re-encodes as %x", msg, out[:n])
			}
		}
		if nonce, now, inc, ok := decodeClockReply(msg); ok {
			out := make([]byte, clockReplyLen)
			if n := encodeClockReply(out, nonce, now, inc); string(out[:n]) != string(msg) {
				t.Fatalf("reply %x re-encodes as %x", msg, out[:n])
			}
		}
	})
}

// TestClockBound: the bound of a server's clock never falls below what
// the server could read, for any server whose clock runs at most drift
// faster than the client's and read its clock after the request was
// sent; and it grows by (1+drift) per unit of client time.
func TestClockBound(t *testing.T) {
	const drift = 1e-3
	c := clockSync{sent: 1000, server: 50_000}
	if got := c.bound(500, drift); got != c.server {
		t.Errorf("bound before the exchange: %d, want the server's reading %d", got, c.server)
	}
	for _, dt := range []int64{0, 1, 1000, int64(time.Second), int64(time.Hour)} {
		b := c.bound(c.sent+dt, drift)
		// The fastest server: it read c.server at the very moment the
		// request was sent, and its clock ran 1+drift times as fast since.
		worst := c.server + int64(float64(dt)*(1+drift))
		if b < worst {
			t.Errorf("bound after %d ns: %d, below the fastest server's clock %d", dt, b, worst)
		}
		if b > worst+2 {
			t.Errorf("bound after %d ns: %d, looser than needed (%d)", dt, b, worst)
		}
	}
}

func TestLeaseHolds(t *testing.T) {
	const drift = 1e-3
	sync := clockSync{sent: int64(10 * time.Second), server: int64(100 * time.Second)}
	at := sync.sent + int64(time.Second) // the server's clock: at most 101.001s
	cases := []struct {
		name  string
		lease uint64
		sync  clockSync
		want  bool
	}{
		{"no lease", 0, clockSync{}, true},
		{"no clock yet", uint64(200 * time.Second), clockSync{}, false},
		{"well within", uint64(102 * time.Second), sync, true},
		{"within the drift margin only", uint64(101*time.Second + 500*time.Microsecond), sync, false},
		{"past", uint64(100 * time.Second), sync, false},
		{"not a time", math.MaxUint64, sync, false},
	}
	for _, c := range cases {
		if got := leaseHolds(c.lease, c.sync, at, drift); got != c.want {
			t.Errorf("%s: leaseHolds = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestSlotJudge(t *testing.T) {
	const k = Key(0x1234)
	seg := func(off uint64, n int) []Segment { return []Segment{{Off: off, Dst: make([]byte, n)}} }
	live := slotImage{key: uint64(k), length: 4096}
	cases := []struct {
		img  slotImage
		segs []Segment
		want status
	}{
		{live, seg(0, 4096), statusOK},
		{live, nil, statusOK},
		{live, seg(4088, 16), statusOutOfBounds},
		{live, seg(8192, 8), statusOutOfBounds},
		{slotImage{key: uint64(k) | keyTombstone, length: 4096}, seg(0, 8), statusRevoked},
		{slotImage{key: uint64(k) + 1, length: 4096}, seg(0, 8), statusBadKey},
		{slotImage{}, seg(0, 8), statusBadKey},
	}
	for i, c := range cases {
		if got := c.img.judge(k, c.segs); got != c.want {
			t.Errorf("case %d: %v, want %v", i, got, c.want)
		}
	}
}

func TestLandingLayout(t *testing.T) {
	for _, c := range []struct{ bytes, maxRead int }{
		{DefaultLandingBytes, DefaultMaxReadLen}, {landingSmall, 8}, {1 << 30, MaxReadLenLimit}, {64 << 10, 64 << 10},
	} {
		small, large, chunk := landingLayout(c.bytes, c.maxRead)
		if small < 16 || large < 2 || chunk < c.maxRead+fabricCheckLen || chunk%landingSmall != 0 {
			t.Errorf("layout of %d bytes, reads up to %d: %d small, %d large of %d", c.bytes, c.maxRead, small, large, chunk)
		}
	}
}

func TestFabricOptions(t *testing.T) {
	o := FabricOptions{Provider: "shm"}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil || o.Progress != ProgressTick || o.ProgressInterval != time.Millisecond {
		t.Fatalf("shm defaults: %+v, %v", o, err)
	}
	o = FabricOptions{Provider: "tcp"}
	o.EnsureDefaults()
	if o.Progress != ProgressAuto || LibfabricName("tcp") != "tcp;ofi_rxm" || LibfabricName("verbs") != "verbs;ofi_rxm" || LibfabricName("sockets") != "sockets" {
		t.Fatalf("tcp defaults: %+v", o)
	}
	if p := fabricProfileOf("tcp;ofi_rxm"); p.progress != ProgressAuto {
		t.Fatalf("a libfabric name maps to its profile: %+v", p)
	}
	for _, bad := range []FabricOptions{
		{}, {Provider: "a|b"}, {Provider: "shm", Progress: "spin"}, {Provider: "shm", ProgressInterval: time.Nanosecond}, {Provider: "shm", Slots: -1},
	} {
		bad.EnsureDefaults()
		if err := bad.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: got %v, want ErrInvalidOptions", bad, err)
		}
	}
	for _, bad := range []FabricClientOptions{
		{}, {Provider: "shm", LandingBytes: 100}, {Provider: "shm", ClockDrift: 0.5}, {Provider: "shm", SyncInterval: time.Microsecond},
	} {
		bad.EnsureDefaults()
		if err := bad.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: got %v, want ErrInvalidOptions", bad, err)
		}
	}
	if c := fabricCaps("verbs", Limits{MaxReadLen: 8, MaxSegments: 1}); !c.SparesServerCPU || !c.OrderedReads {
		t.Errorf("verbs caps %v", c)
	}
	if c := fabricCaps("efa", Limits{}); c.OrderedReads {
		t.Errorf("efa caps claim ordered reads: %v", c)
	}
}

// TestFabricNotBuilt: without the libfabric tag the provider is not
// listed, and asking for it says how to get it.
func TestFabricNotBuilt(t *testing.T) {
	if FabricBuilt {
		t.Skip("built with libfabric")
	}
	_, err := NewServer(ServerConfig{Provider: ProviderFabric})
	if !errors.Is(err, ErrUnknownProvider) || !strings.Contains(err.Error(), "-tags libfabric") {
		t.Fatalf("NewServer(fabric): %v", err)
	}
	for _, p := range Providers() {
		if p == ProviderFabric {
			t.Fatal("fabric listed without the build tag")
		}
	}
}

// TestFabricTableLayout: a slot written at its documented offsets decodes
// to the same words; slots follow the 64-byte header, 32 bytes each.
func TestFabricTableLayout(t *testing.T) {
	table := make([]byte, fabricTableSize(4))
	if len(table) != 64+4*32 || fabricSlotOffset(0) != 64 || fabricSlotOffset(3) != 64+3*32 {
		t.Fatalf("table of 4 slots: %d bytes, slot 3 at %d", len(table), fabricSlotOffset(3))
	}
	off := fabricSlotOffset(2)
	le.PutUint64(table[off+offSlotKey:], 0x77)
	le.PutUint64(table[off+offSlotLease:], 123456789)
	le.PutUint64(table[off+offSlotLen:], 8<<20)
	if got := decodeSlot(table[off:]); got != (slotImage{key: 0x77, lease: 123456789, length: 8 << 20}) {
		t.Fatalf("decoded %+v", got)
	}
}
