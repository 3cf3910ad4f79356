package record

import (
	"bytes"
	"errors"
	"maps"
	"testing"
)

func TestEncodeDecode(t *testing.T) {
	rec := map[string][]byte{"field0": []byte("a"), "field1": {}, "field2": []byte("\x00\xffbinary")}
	b := Encode(rec)
	if !bytes.Equal(b, Encode(maps.Clone(rec))) {
		t.Fatal("equal records encode differently")
	}
	got, err := Decode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, rec, bytes.Equal) {
		t.Fatalf("Decode(all) = %q, want %q", got, rec)
	}
	got, err = Decode(b, []string{"field2", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || string(got["field2"]) != "\x00\xffbinary" {
		t.Fatalf("Decode(field2) = %q", got)
	}
}

func TestDecodeCorrupt(t *testing.T) {
	b := Encode(map[string][]byte{"field0": []byte("value")})
	for _, bad := range [][]byte{b[:len(b)-1], b[:3], {0xff}} {
		if _, err := Decode(bad, nil); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Decode(%q) = %v, want ErrCorrupt", bad, err)
		}
	}
}

func TestMerge(t *testing.T) {
	old := Encode(map[string][]byte{"field0": []byte("a"), "field1": []byte("b")})
	b, err := Merge(old, map[string][]byte{"field1": []byte("B"), "field2": []byte("C")})
	if err != nil {
		t.Fatal(err)
	}
	want := Encode(map[string][]byte{"field0": []byte("a"), "field1": []byte("B"), "field2": []byte("C")})
	if !bytes.Equal(b, want) {
		t.Fatalf("Merge = %q, want %q", b, want)
	}
}

func TestWhole(t *testing.T) {
	two := map[string][]byte{"field0": nil, "field1": nil}
	cases := []struct {
		update map[string][]byte
		n      int
		want   bool
	}{
		{two, 2, true},
		{two, 3, false},
		{map[string][]byte{"field0": nil, "other": nil}, 2, false},
		{map[string][]byte{"field1": nil}, 1, false},
	}
	for _, c := range cases {
		if got := Whole(c.update, c.n); got != c.want {
			t.Errorf("Whole(%v, %d) = %v, want %v", c.update, c.n, got, c.want)
		}
	}
}

func TestKeysOfATableSortTogether(t *testing.T) {
	k, end := Key("usertable", "user9"), TableEnd("usertable")
	if !(Key("usertable", "") < k && k < end && Key("usertable0", "a") >= end) {
		t.Fatalf("keys %q, end %q do not bound the table", k, end)
	}
	if StripTable("usertable", k) != "user9" {
		t.Fatal("StripTable")
	}
}
