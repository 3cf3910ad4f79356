package wire

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cellstore/cell/internal/testutil"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHeaderEncoding pins the header layout field by field (format.go).
func TestHeaderEncoding(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    Header
		body []byte
		want string
	}{
		{"ping request", Header{Op: OpPing, ID: 1}, nil,
			"20000000 ce 01 01 00 0100000000000000 0000 0000 00000000 00000000 00000000"},
		{"request with budget", Header{Op: OpGet, ID: 0x0102030405060708, BudgetMicros: 10000}, []byte{0xaa},
			"21000000 ce 01 11 00 0807060504030201 0000 0000 00000000 00000000 10270000 aa"},
		{"retried write", Header{Op: OpPut, Flags: FlagRetry, ID: 2}, nil,
			"20000000 ce 01 20 02 0200000000000000 0000 0000 00000000 00000000 00000000"},
		{"reply with timing", Header{Op: OpSearch, Flags: FlagReply, ID: 9, Status: StatusWrongServer,
			QueueNanos: 1500, ServiceNanos: 0xfffffffe}, nil,
			"20000000 ce 01 10 01 0900000000000000 0900 0000 dc050000 feffffff 00000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := AppendFrame(nil, tc.h, tc.body)
			if want := mustHex(t, tc.want); string(got) != string(want) {
				t.Fatalf("got  %x\nwant %x", got, want)
			}
			var h Header
			if err := h.Decode(got); err != nil {
				t.Fatal(err)
			}
			tc.h.Length = uint32(len(got))
			if h != tc.h {
				t.Fatalf("decoded %v, want %v", h, tc.h)
			}
		})
	}
}

func TestHeaderDecodeErrors(t *testing.T) {
	good := AppendFrame(nil, Header{Op: OpPing, ID: 77}, nil)
	for _, tc := range []struct {
		name   string
		mutate func(b []byte) []byte
		want   error
	}{
		{"short buffer", func(b []byte) []byte { return b[:HeaderSize-1] }, ErrBadLength},
		{"bad magic", func(b []byte) []byte { b[offMagic] = 0; return b }, ErrBadMagic},
		{"bad version", func(b []byte) []byte { b[offVersion] = 2; return b }, ErrBadVersion},
		{"unknown flag", func(b []byte) []byte { b[offFlags] = 0x80; return b }, ErrBadVersion},
		{"reserved set", func(b []byte) []byte { b[offRsv+1] = 1; return b }, ErrBadVersion},
		{"length below header", func(b []byte) []byte { le.PutUint32(b, HeaderSize-1); return b }, ErrBadLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.mutate(append([]byte(nil), good...))
			var h Header
			err := h.Decode(b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if InSync(err) {
				t.Fatalf("%v must not count as in sync", err)
			}
			if errors.Is(err, ErrBadVersion) && h.ID != 77 {
				t.Fatalf("bad version header lost its id: %v", h)
			}
		})
	}
}

func TestTimingSaturates(t *testing.T) {
	var h Header
	h.SetTiming(-time.Second, 10*time.Second)
	if h.QueueNanos != 0 || h.ServiceNanos != math.MaxUint32 {
		t.Fatalf("got queue %d service %d", h.QueueNanos, h.ServiceNanos)
	}
	h.SetTiming(1500*time.Nanosecond, 3*time.Microsecond)
	if h.QueueTime() != 1500*time.Nanosecond || h.ServiceTime() != 3*time.Microsecond {
		t.Fatalf("got %v %v", h.QueueTime(), h.ServiceTime())
	}
	arrived := time.Now()
	if _, ok := h.Deadline(arrived); ok {
		t.Error("no budget, but a deadline")
	}
	h.SetBudget(time.Millisecond)
	if dl, ok := h.Deadline(arrived); !ok || !dl.Equal(arrived.Add(time.Millisecond)) {
		t.Errorf("deadline %v %v", dl, ok)
	}
	for _, tc := range []struct {
		d    time.Duration
		want uint32
	}{{0, 0}, {-1, 0}, {1, 1}, {time.Microsecond, 1}, {1001 * time.Nanosecond, 2}, {100 * time.Hour, math.MaxUint32}} {
		h.SetBudget(tc.d)
		if h.BudgetMicros != tc.want {
			t.Errorf("SetBudget(%v) = %d, want %d", tc.d, h.BudgetMicros, tc.want)
		}
	}
}

func TestOpsAndStatuses(t *testing.T) {
	for _, op := range []Op{OpPing, OpMetadata, OpSearch, OpGet, OpContains, OpRange, OpNodeDump, OpCheck, OpReplicaHash, OpMoveReplica, OpTransferLeader, OpPut, OpDelete, OpSplitBegin, OpSplitAppend, OpSplitEnd, OpInsertChild, OpMeganode} {
		if !op.Known() || !op.Valid() || strings.HasPrefix(op.String(), "Op(") {
			t.Errorf("%v: known=%v valid=%v", op, op.Known(), op.Valid())
		}
	}
	for _, op := range []Op{0, 0x03, OpSplitLast, OpRaftLast, OpReadFirst, 0xbf} {
		if op.Valid() {
			t.Errorf("%v should be unknown", op)
		}
	}
	if !Op(0xc7).Valid() || Op(0xc7).Known() || Op(0xc7).String() != "Op(0xc7)" {
		t.Errorf("extension op: %v", Op(0xc7))
	}
	if !OpPut.IsWrite() || !OpDelete.IsWrite() || OpGet.IsWrite() {
		t.Error("IsWrite")
	}

	if StatusOK.Err() != nil || StatusOf(nil) != StatusOK {
		t.Fatal("OK must map to nil")
	}
	seen := map[error]Status{}
	for s := StatusNotFound; s.Known(); s++ {
		err := s.Err()
		if err == nil || !strings.HasPrefix(err.Error(), "wire: ") || strings.HasPrefix(s.String(), "Status(") {
			t.Errorf("status %d: err %v name %v", uint16(s), err, s)
		}
		if prev, dup := seen[err]; dup {
			t.Errorf("%v and %v share %v", prev, s, err)
		}
		seen[err] = s
		if got := StatusOf(fmt.Errorf("context: %w", err)); got != s {
			t.Errorf("StatusOf(%v) = %v, want %v", err, got, s)
		}
	}
	if !errors.Is(Status(999).Err(), ErrUnknownStatus) || Status(999).String() != "Status(999)" {
		t.Error("unknown status")
	}
	if StatusOf(fmt.Errorf("x: %w", ErrMalformed)) != StatusBadRequest ||
		StatusOf(errors.New("boom")) != StatusInternal {
		t.Error("StatusOf fallbacks")
	}
	se := &StatusError{Status: StatusWrongServer, Leader: "h:1"}
	if !errors.Is(se, ErrWrongServer) || StatusOf(fmt.Errorf("w: %w", se)) != StatusWrongServer {
		t.Error("StatusError unwrap")
	}
}

// TestGoldenFrames pins the bytes of the header and of every message body
// (testdata/frames.golden). A diff there is a wire format change.
func TestGoldenFrames(t *testing.T) {
	var b strings.Builder
	for i, s := range samples() {
		h := Header{Op: s.op, ID: uint64(i + 1)}
		if s.reply {
			h.Flags = FlagReply
			h.SetTiming(1500*time.Nanosecond, 3*time.Microsecond)
			if _, ok := s.msg.(*ErrorReply); ok {
				h.Status = StatusWrongServer
			}
		} else {
			h.SetBudget(10 * time.Millisecond)
		}
		frame := AppendFrame(nil, h, s.msg.AppendTo(nil))
		fmt.Fprintf(&b, "# %s: %+v\n", s.name, s.msg)
		b.WriteString(annotate(frame, s.fresh()))
		b.WriteString("\n")
	}
	testutil.Golden(t, "frames.golden", b.String(), "wire format")
}

// annotate renders a frame as an annotated hex dump, naming the body's
// fields as m's decoder reads them.
func annotate(frame []byte, m Message) string {
	var h Header
	if err := h.Decode(frame); err != nil {
		return err.Error() + "\n"
	}
	var b strings.Builder
	field := func(off, n int, what string) {
		fmt.Fprintf(&b, "%04x  %-24s %s\n", off, hex.EncodeToString(frame[off:off+n]), what)
	}
	field(offLength, 4, fmt.Sprintf("length %d", h.Length))
	field(offMagic, 1, "magic")
	field(offVersion, 1, fmt.Sprintf("version %d", frame[offVersion]))
	field(offOp, 1, "op "+h.Op.String())
	field(offFlags, 1, "flags "+h.Flags.String())
	field(offID, 8, fmt.Sprintf("id %d", h.ID))
	field(offStatus, 2, "status "+h.Status.String())
	field(offRsv, 2, "reserved")
	field(offQueue, 4, fmt.Sprintf("queue %dns", h.QueueNanos))
	field(offService, 4, fmt.Sprintf("service %dns", h.ServiceNanos))
	field(offBudget, 4, fmt.Sprintf("budget %dµs", h.BudgetMicros))
	body := frame[HeaderSize:]
	d := decoder{b: body, trace: func(off, n int, what string, isLen bool) {
		if isLen {
			what += " length"
		}
		// Long fields are shown in rows of 12 bytes.
		for i := 0; i < n || i == 0; i += 12 {
			field(HeaderSize+off+i, min(12, n-i), what)
			what = "  ..."
		}
	}}
	m.(interface{ decode(*decoder) }).decode(&d)
	if err := d.finish("golden"); err != nil {
		fmt.Fprintf(&b, "decode error: %v\n", err)
	}
	return b.String()
}
