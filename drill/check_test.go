package drill

import (
	"slices"
	"testing"
	"time"
)

// ms builds an operation from call to ret milliseconds.
func ms(client int, stage Stage, kind Kind, key, value string, found bool, o Outcome, call, ret int) Op {
	return Op{Client: client, Stage: stage, Kind: kind, Key: key, Value: value, Found: found, Outcome: o,
		Call: time.Duration(call) * time.Millisecond, Return: time.Duration(ret) * time.Millisecond}
}

func put(c int, v string, o Outcome, call, ret int) Op {
	return ms(c, StageLoad, Put, "k", v, false, o, call, ret)
}

func del(c int, o Outcome, call, ret int) Op {
	return ms(c, StageLoad, Delete, "k", "", true, o, call, ret)
}

func final(v string, found bool, call int) Op {
	return ms(9, StageVerify, Get, "k", v, found, OK, call, call+1)
}

// The durability check's cases: what a final read may return after each
// history of writes to one key.
func TestCheckDurability(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Op
		lost bool
	}{
		{"never written, absent", []Op{final("", false, 10)}, false},
		{"last ack", []Op{put(0, "a", OK, 0, 1), put(0, "b", OK, 2, 3), final("b", true, 10)}, false},
		{"earlier ack lost the later", []Op{put(0, "a", OK, 0, 1), put(0, "b", OK, 2, 3), final("a", true, 10)}, true},
		{"ack lost, absent", []Op{put(0, "a", OK, 0, 1), final("", false, 10)}, true},
		{"never written value", []Op{put(0, "a", OK, 0, 1), final("x", true, 10)}, true},
		{"concurrent acks, either", []Op{put(0, "a", OK, 0, 5), put(1, "b", OK, 1, 4), final("a", true, 10)}, false},
		{"concurrent acks, other", []Op{put(0, "a", OK, 0, 5), put(1, "b", OK, 1, 4), final("b", true, 10)}, false},
		{"unknown after ack", []Op{put(0, "a", OK, 0, 1), put(0, "b", Unknown, 2, 3), final("b", true, 10)}, false},
		{"unknown not applied", []Op{put(0, "a", OK, 0, 1), put(0, "b", Unknown, 2, 3), final("a", true, 10)}, false},
		{"unknown may apply late", []Op{put(0, "b", Unknown, 0, 1), put(0, "a", OK, 2, 3), final("b", true, 10)}, false},
		{"failed put", []Op{put(0, "a", OK, 0, 1), put(0, "b", Failed, 2, 3), final("b", true, 10)}, true},
		{"acked delete", []Op{put(0, "a", OK, 0, 1), del(0, OK, 2, 3), final("", false, 10)}, false},
		{"acked delete lost", []Op{put(0, "a", OK, 0, 1), del(0, OK, 2, 3), final("a", true, 10)}, true},
		{"unknown delete", []Op{put(0, "a", OK, 0, 1), del(0, Unknown, 2, 3), final("", false, 10)}, false},
		{"write after the read", []Op{put(0, "a", OK, 0, 1), final("a", true, 10), put(0, "b", OK, 20, 21)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lost := CheckDurability(tc.ops)
			if (len(lost) > 0) != tc.lost {
				t.Errorf("lost %v, want lost %v", lost, tc.lost)
			}
		})
	}
}

// Linearizability per key: a read of an overwritten value after the
// overwrite was acknowledged is a violation; unknown writes may happen
// late or never; a failed write never happened.
func TestCheckLinearizable(t *testing.T) {
	get := func(v string, found bool, call, ret int) Op {
		return ms(1, StageLoad, Get, "k", v, found, OK, call, ret)
	}
	for _, tc := range []struct {
		name string
		ops  []Op
		want Verdict
	}{
		{"sequential", []Op{put(0, "a", OK, 0, 1), get("a", true, 2, 3), put(0, "b", OK, 4, 5), get("b", true, 6, 7)}, Linearizable},
		{"stale read", []Op{put(0, "a", OK, 0, 1), put(0, "b", OK, 2, 3), get("a", true, 4, 5)}, NotLinearizable},
		{"concurrent read sees either", []Op{put(0, "a", OK, 0, 1), put(0, "b", OK, 2, 6), get("a", true, 3, 4), get("b", true, 5, 7)}, Linearizable},
		{"read goes back", []Op{put(0, "a", OK, 0, 1), put(0, "b", OK, 2, 9), get("b", true, 3, 4), get("a", true, 5, 6)}, NotLinearizable},
		{"unknown applies late", []Op{put(0, "a", OK, 0, 1), put(0, "b", Unknown, 2, 3), get("a", true, 4, 5), get("b", true, 6, 7)}, Linearizable},
		{"failed never applies", []Op{put(0, "a", OK, 0, 1), put(0, "b", Failed, 2, 3), get("b", true, 4, 5)}, NotLinearizable},
		{"delete then absent", []Op{put(0, "a", OK, 0, 1), del(0, OK, 2, 3), get("", false, 4, 5)}, Linearizable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			got, err := CheckLinearizable(tc.ops, 10*time.Second, dir)
			if err != nil {
				t.Fatal(err)
			}
			if got.Verdict != tc.want {
				t.Fatalf("verdict %q, want %q", got.Verdict, tc.want)
			}
			if tc.want != Linearizable && (!slices.Equal(got.Keys, []string{"k"}) || got.Visualization == "") {
				t.Errorf("offending keys %q, visualisation %q", got.Keys, got.Visualization)
			}
		})
	}
}

// Keys are checked apart: a violation on one key names only that key.
func TestCheckLinearizableNamesTheKey(t *testing.T) {
	ops := []Op{
		ms(0, StageLoad, Put, "good", "a", false, OK, 0, 1),
		ms(1, StageLoad, Get, "good", "a", true, OK, 2, 3),
		ms(0, StageLoad, Put, "bad/1", "a", false, OK, 0, 1),
		ms(1, StageLoad, Get, "bad/1", "", false, OK, 2, 3),
	}
	got, err := CheckLinearizable(ops, 10*time.Second, "")
	if err != nil || got.Verdict != NotLinearizable || !slices.Equal(got.Keys, []string{"bad/1"}) || got.Visualization != "" {
		t.Fatalf("got %+v, %v", got, err)
	}
}
