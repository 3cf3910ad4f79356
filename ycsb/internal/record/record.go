// Package record is the value encoding the cell and etcd bindings share:
// a YCSB record (a set of named fields) stored as one value, and the
// field-level operations YCSB's DB interface asks for (a subset on read,
// a merge on update).
//
// The encoding is a sequence of (uvarint name length, name, uvarint value
// length, value), fields sorted by name so that equal records encode to
// equal bytes. It is binary rather than JSON because YCSB's field values
// are arbitrary bytes and because encoding costs client CPU that the
// Redis binding (a hash, no encoding) does not pay: the cheaper it is,
// the fairer the comparison.
package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// ErrCorrupt is returned for a value that is not a valid encoding.
var ErrCorrupt = errors.New("record: corrupt value")

// Encode returns the encoding of fields, names in ascending order.
func Encode(fields map[string][]byte) []byte {
	names := make([]string, 0, len(fields))
	size := 0
	for name, v := range fields {
		names = append(names, name)
		size += 2*binary.MaxVarintLen32 + len(name) + len(v)
	}
	slices.Sort(names)
	buf := make([]byte, 0, size)
	for _, name := range names {
		buf = binary.AppendUvarint(buf, uint64(len(name)))
		buf = append(buf, name...)
		v := fields[name]
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
	}
	return buf
}

// Decode returns the fields of b that want selects (every field when want
// is empty). The values are copies: b may be reused.
func Decode(b []byte, want []string) (map[string][]byte, error) {
	out := make(map[string][]byte)
	for len(b) > 0 {
		name, rest, err := chunk(b)
		if err != nil {
			return nil, err
		}
		value, rest, err := chunk(rest)
		if err != nil {
			return nil, err
		}
		b = rest
		if len(want) == 0 || slices.Contains(want, string(name)) {
			out[string(name)] = slices.Clone(value)
		}
	}
	return out, nil
}

// chunk splits a length-prefixed byte string off b.
func chunk(b []byte) (data, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, fmt.Errorf("%w: bad length at %d bytes from the end", ErrCorrupt, len(b))
	}
	return b[k : k+int(n)], b[k+int(n):], nil
}

// Merge returns the encoding of old's fields overwritten by update's: the
// record YCSB's Update leaves ("any field/value pairs will be written into
// the database or overwrite the existing values with the same field
// name").
func Merge(old []byte, update map[string][]byte) ([]byte, error) {
	fields, err := Decode(old, nil)
	if err != nil {
		return nil, err
	}
	for name, v := range update {
		fields[name] = v
	}
	return Encode(fields), nil
}

// Key returns the store key of a YCSB record: "table/key". Keys of one
// table are contiguous and in YCSB's key order, so a scan of a table is a
// range from Key(table, start) to TableEnd(table).
func Key(table, key string) string { return table + "/" + key }

// TableEnd returns the first key after every key of table: "table0" ('0'
// follows '/').
func TableEnd(table string) string { return table + "0" }

// StripTable returns key without its "table/" prefix.
func StripTable(table, key string) string { return key[len(table)+1:] }

// Whole reports whether update gives every field of a record of
// fieldCount fields (field0..field<fieldCount-1>, YCSB's names): then an
// update replaces the record and needs no read of the old one. The
// bindings use it so that an update costs one write in every store when
// the workload writes all fields (writeallfields=true), and a
// read-modify-write otherwise.
func Whole(update map[string][]byte, fieldCount int) bool {
	if len(update) != fieldCount {
		return false
	}
	for i := range fieldCount {
		if _, ok := update[fmt.Sprintf("field%d", i)]; !ok {
			return false
		}
	}
	return true
}
