package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func mustReader(t testing.TB, r io.Reader, o *Options) *Reader {
	t.Helper()
	rd, err := NewReader(r, o)
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

func TestReaderFrames(t *testing.T) {
	big := bytes.Repeat([]byte("x"), retainLimit+1)
	var stream []byte
	bodies := [][]byte{nil, []byte("hello"), big, []byte("after big"), make([]byte, 1000)}
	for i, b := range bodies {
		stream = AppendFrame(stream, Header{Op: OpPing, ID: uint64(i + 1)}, b)
	}
	for _, pooled := range []bool{false, true} {
		rd := mustReader(t, bytes.NewReader(stream), nil)
		for i, want := range bodies {
			var f Frame
			var err error
			if pooled {
				f, err = rd.ReadFramePooled()
			} else {
				f, err = rd.ReadFrame()
			}
			if err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			if f.Header.ID != uint64(i+1) || f.Header.Op != OpPing || !bytes.Equal(f.Body, want) {
				t.Fatalf("frame %d: got %v body %d bytes", i, f.Header, len(f.Body))
			}
			f.Release()
		}
		if _, err := rd.ReadFrame(); err != io.EOF {
			t.Fatalf("at end: got %v, want io.EOF", err)
		}
	}
}

func TestReaderStaysInSync(t *testing.T) {
	var stream []byte
	stream = AppendFrame(stream, Header{Op: OpPut, ID: 1}, make([]byte, 100)) // too large
	stream = AppendFrame(stream, Header{Op: 0x03, ID: 2}, []byte("??"))       // unknown op
	stream = AppendFrame(stream, Header{Op: OpGet, ID: 3}, []byte("ok"))
	rd := mustReader(t, bytes.NewReader(stream), &Options{MaxFrameSize: HeaderSize + 64})

	f, err := rd.ReadFrame()
	if !errors.Is(err, ErrFrameTooLarge) || !InSync(err) || f.Header.ID != 1 || f.Header.Op != OpPut {
		t.Fatalf("too large: got %v %v", f.Header, err)
	}
	f, err = rd.ReadFramePooled()
	if !errors.Is(err, ErrUnknownOp) || !InSync(err) || f.Header.ID != 2 {
		t.Fatalf("unknown op: got %v %v", f.Header, err)
	}
	f, err = rd.ReadFrame()
	if err != nil || f.Header.ID != 3 || string(f.Body) != "ok" {
		t.Fatalf("after: got %v %q %v", f.Header, f.Body, err)
	}
}

func TestReaderCorruptAndTruncated(t *testing.T) {
	good := AppendFrame(nil, Header{Op: OpGet, ID: 9}, []byte("body"))
	for _, tc := range []struct {
		name   string
		stream []byte
		want   error
	}{
		{"bad magic", append([]byte{0x24, 0, 0, 0, 'G', 'E', 'T', ' '}, make([]byte, 40)...), ErrBadMagic},
		{"bad version", func() []byte { b := bytes.Clone(good); b[offVersion] = 9; return b }(), ErrBadVersion},
		{"short length", func() []byte { b := bytes.Clone(good); le.PutUint32(b, 4); return b }(), ErrBadLength},
		{"mid header", good[:10], io.ErrUnexpectedEOF},
		{"mid body", good[:len(good)-1], io.ErrUnexpectedEOF},
		{"too large, truncated body", func() []byte {
			return AppendFrame(nil, Header{Op: OpGet}, make([]byte, 200))[:100]
		}(), io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd := mustReader(t, bytes.NewReader(tc.stream), &Options{MaxFrameSize: 128})
			_, err := rd.ReadFrame()
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if InSync(err) {
				t.Fatalf("%v reported in sync", err)
			}
		})
	}
}

// loopReader serves the same bytes forever.
type loopReader struct {
	b   []byte
	off int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.b[r.off:])
		n += c
		r.off = (r.off + c) % len(r.b)
	}
	return n, nil
}

func TestReaderDoesNotAllocate(t *testing.T) {
	frame := AppendFrame(nil, Header{Op: OpSearch, ID: 1}, make([]byte, 200))
	rd := mustReader(t, &loopReader{b: frame}, nil)
	for _, pooled := range []bool{false, true} {
		allocs := testing.AllocsPerRun(1000, func() {
			var f Frame
			var err error
			if pooled {
				f, err = rd.ReadFramePooled()
			} else {
				f, err = rd.ReadFrame()
			}
			if err != nil || len(f.Body) != 200 {
				t.Fatal(err)
			}
			f.Release()
		})
		// sync.Pool may drop a buffer at a GC; allow for that.
		if allocs > 0.01 {
			t.Errorf("pooled=%v: %v allocations per frame", pooled, allocs)
		}
	}
}
