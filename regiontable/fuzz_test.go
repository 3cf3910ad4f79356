package regiontable

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/cellstore/cell/blink"
)

// FuzzDecodeRegion: any bytes under a region's key decode to a valid
// region entry for that key or to ErrCorruption, never a panic; what
// decodes survives a round trip through its stored form.
func FuzzDecodeRegion(f *testing.F) {
	good, _ := json.Marshal(Region{ID: 7, Kind: KindData, Size: 1 << 30, Host: "s1", Epoch: 3, Term: 2,
		Replicas: []string{"s1", "s2", "s3"}, Path: "/dev/shm/cell-x-7",
		ReadKey: []json.RawMessage{json.RawMessage(`{"provider":"tcp","key":5,"region":7,"len":4096,"addr":"127.0.0.1:7071"}`)}})
	f.Add("/cell/regions/00000007", good)
	f.Add("/cell/regions/00000008", good)
	f.Add("/cell/regions/7", good)
	f.Add("/cell/regions/00000007", []byte(`{"ID":0}`))
	f.Add("/cell/regions/00000007", []byte(`{"ID":7,"ReadKey":[1,"x",null]}`))
	f.Add("/cell/regions/00000007", []byte(`null`))
	f.Fuzz(func(t *testing.T, key string, b []byte) {
		r, err := decodeRegion(key, b)
		if err != nil {
			if !errors.Is(err, ErrCorruption) {
				t.Fatalf("error %v is not ErrCorruption", err)
			}
			return
		}
		if r.ID == 0 || r.ID > blink.MaxRegionID {
			t.Fatalf("decoded region ID %d", r.ID)
		}
		if regionName(r.ID) != key[len(key)-8:] {
			t.Fatalf("region %d decoded under key %q", r.ID, key)
		}
		for _, p := range []string{"tcp", "shm", "x"} {
			r.ReadKeyFor(p)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := decodeRegion(key, again)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(normalize(r), normalize(r2)) {
			t.Fatalf("round trip:\n%+v\n%+v", r, r2)
		}
	})
}

// normalize makes nil and empty slices and raw JSON spacing compare equal.
func normalize(r Region) Region {
	if len(r.Replicas) == 0 {
		r.Replicas = nil
	}
	if len(r.Learners) == 0 {
		r.Learners = nil
	}
	var keys []json.RawMessage
	for _, k := range r.ReadKey {
		var v any
		if json.Unmarshal(k, &v) == nil {
			k, _ = json.Marshal(v)
		}
		keys = append(keys, k)
	}
	r.ReadKey = keys
	return r
}

// FuzzDecodeMember: any bytes under a member's key decode to a valid
// member or to ErrCorruption.
func FuzzDecodeMember(f *testing.F) {
	good, _ := json.Marshal(Member{ID: "s1", RPCAddr: "127.0.0.1:7070"})
	f.Add(good)
	f.Add([]byte(`{"ID":"bad id","RPCAddr":"x"}`))
	f.Add([]byte(`{"ID":"s1"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMember("/cell/members/s1", b)
		if err != nil {
			if !errors.Is(err, ErrCorruption) {
				t.Fatalf("error %v is not ErrCorruption", err)
			}
			return
		}
		if err := validMember(&m); err != nil {
			t.Fatalf("decoded an invalid member: %v", err)
		}
	})
}

// FuzzParseRoot: a stored root pointer parses to the value it formats
// from, and anything else is ErrCorruption.
func FuzzParseRoot(f *testing.F) {
	f.Add("0x0000000100001000")
	f.Add("4096")
	f.Add(" 0x10 ")
	f.Add("-1")
	f.Add("0x1ffffffffffffffff")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseRoot(s)
		if err != nil {
			if !errors.Is(err, ErrCorruption) {
				t.Fatalf("error %v is not ErrCorruption", err)
			}
			return
		}
		if q, err := ParseRoot(FormatRoot(p)); err != nil || q != p {
			t.Fatalf("FormatRoot(%v) parses to %v, %v", p, q, err)
		}
	})
}
