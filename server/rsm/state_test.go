package rsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/meganode"
)

// The replicated state at a snapshot's head (the splits in progress and
// the session table) decodes without panicking, never reads past its
// own end, and what it accepts in the current version re-encodes to the
// bytes it read: the image that follows it is left to the image's reader,
// and one state has one encoding. An older version's state re-encodes in
// the current version, to bytes that read back to themselves.
func FuzzReadState(f *testing.F) {
	st := State{Formatted: true, Applied: 42, NewRoot: blink.MakePtr(3, 0x1000),
		Splits: []SplitProgress{{X: blink.MakePtr(3, 0x21000), Y: blink.MakePtr(9, 0x41000), Sep: []byte("m"), Linked: true}}}
	st.Sessions.record(7, 1, false, 40)
	st.Sessions.record(7, 2, true, 41)
	st.Sessions.record(3, 9, false, 42)
	f.Add(st.encode())
	f.Add(append(st.encode(), "image"...))
	f.Add((&State{}).encode())
	st.Sessions.markEvicted(99) // a filter of one level (state version 3)
	st.Sessions.evicted.merge(&evictedFilter{levels: []filterLevel{{scheme: schemeLegacy, bits: make([]byte, legacyFilterBits/8)}}})
	f.Add(st.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		got, err := ReadState(r)
		if err != nil {
			if !errors.Is(err, meganode.ErrCorruption) {
				t.Fatalf("error %v is not corruption", err)
			}
			return
		}
		read := b[:len(b)-r.Len()]
		enc := got.encode()
		if le.Uint32(read[4:]) == replVersion {
			if !bytes.Equal(enc, read) {
				t.Fatalf("accepted state does not re-encode to the %d bytes read:\n in %x\nout %x", len(read), read, enc)
			}
			return
		}
		again, err := ReadState(bytes.NewReader(enc))
		if err != nil {
			t.Fatalf("an older state re-encoded does not read back: %v\n in %x\nout %x", err, read, enc)
		}
		if enc2 := again.encode(); !bytes.Equal(enc2, enc) {
			t.Fatalf("an older state re-encoded is not stable:\n in %x\nout %x\nthen %x", read, enc, enc2)
		}
	})
}
