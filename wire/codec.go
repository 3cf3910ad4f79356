package wire

import "fmt"

// Building blocks of message bodies. Every body is a sequence of fixed-size
// little-endian integers and length-prefixed byte strings:
//
//	bytes:  [len u32][len bytes]
//	bool:   u8, 0 or 1
//	flags:  u8, only the bits the message defines
//
// Encodings are canonical: a decoder accepts exactly the bytes its encoder
// produces for some value (no trailing bytes, no unknown flag bits, bools
// 0 or 1, no key stored beside an infinity flag), so decode-then-encode
// returns the input. The fuzz tests check this.

func appendU8(b []byte, v uint8) []byte   { return append(b, v) }
func appendU16(b []byte, v uint16) []byte { return le.AppendUint16(b, v) }
func appendU32(b []byte, v uint32) []byte { return le.AppendUint32(b, v) }
func appendU64(b []byte, v uint64) []byte { return le.AppendUint64(b, v) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendBytes(b, p []byte) []byte {
	b = le.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

func appendString(b []byte, s string) []byte {
	b = le.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// bit returns b if v, else 0.
func bit(v bool, b uint8) uint8 {
	if v {
		return b
	}
	return 0
}

// decoder reads a body front to back. The first error sticks; later reads
// return zero values. Byte strings alias the body (capacity clipped, so
// appending to one never overwrites the body).
type decoder struct {
	b   []byte
	off int
	err error
	// trace, if set, is told of every field read: its offset, size and
	// name, and whether it is the length prefix of a byte string. Tests use
	// it to annotate golden dumps.
	trace func(off, n int, what string, isLen bool)
}

func (d *decoder) failf(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (d *decoder) take(n int, what string) []byte { return d.takeField(n, what, false) }

func (d *decoder) takeField(n int, what string, isLen bool) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b)-d.off {
		d.failf("%s truncated at byte %d", what, d.off)
		return nil
	}
	if d.trace != nil {
		d.trace(d.off, n, what, isLen)
	}
	p := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return p
}

func (d *decoder) u8(what string) uint8 {
	if p := d.take(1, what); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u16(what string) uint16 {
	if p := d.take(2, what); p != nil {
		return le.Uint16(p)
	}
	return 0
}

func (d *decoder) u32(what string) uint32 {
	if p := d.take(4, what); p != nil {
		return le.Uint32(p)
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if p := d.take(8, what); p != nil {
		return le.Uint64(p)
	}
	return 0
}

func (d *decoder) bool(what string) bool {
	v := d.u8(what)
	if v > 1 {
		d.failf("%s: bool byte %d", what, v)
	}
	return v == 1
}

// flags reads a flag byte and rejects bits outside known.
func (d *decoder) flags(known uint8, what string) uint8 {
	v := d.u8(what)
	if v&^known != 0 {
		d.failf("%s: unknown flag bits %#02x", what, v&^known)
	}
	return v
}

// bytes reads a length-prefixed byte string; empty decodes as nil.
func (d *decoder) bytes(what string) []byte {
	p := d.takeField(4, what, true)
	if p == nil {
		return nil
	}
	n := le.Uint32(p)
	if n == 0 {
		return nil
	}
	return d.take(int(n), what)
}

// string reads a length-prefixed byte string into a new string.
func (d *decoder) string(what string) string { return string(d.bytes(what)) }

// count reads a list length and checks that the rest of the body can hold
// that many items of at least minSize bytes each, so that a hostile count
// cannot make the caller allocate.
func (d *decoder) count(minSize int, what string) int {
	n := d.u32(what)
	if d.err == nil && uint64(n)*uint64(minSize) > uint64(len(d.b)-d.off) {
		d.failf("%s: %d items cannot fit in %d bytes", what, n, len(d.b)-d.off)
		return 0
	}
	return int(n)
}

// finish reports the first error, or trailing bytes.
func (d *decoder) finish(what string) error {
	if d.err == nil && d.off != len(d.b) {
		d.failf("%s: %d trailing bytes", what, len(d.b)-d.off)
	}
	return d.err
}
