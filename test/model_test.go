package test

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// The model the linearizability test checks against accepts linearizable
// histories and rejects a stale read, a lost delete and a read of a value
// nobody wrote; a pending write may take effect or not.
func TestKVModel(t *testing.T) {
	put := func(c int, k, v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: kvInput{Op: opPut, Key: k, Value: v}, Output: kvOutput{}, Call: call, Return: ret}
	}
	get := func(c int, k, v string, found bool, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: kvInput{Op: opGet, Key: k}, Output: kvOutput{Found: found, Value: v}, Call: call, Return: ret}
	}
	del := func(c int, k string, found bool, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: kvInput{Op: opDelete, Key: k}, Output: kvOutput{Found: found}, Call: call, Return: ret}
	}
	has := func(c int, k string, found bool, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: kvInput{Op: opContains, Key: k}, Output: kvOutput{Found: found}, Call: call, Return: ret}
	}
	unknown := func(op porcupine.Operation) porcupine.Operation {
		op.Output = kvOutput{Unknown: true}
		return op
	}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"sequential", []porcupine.Operation{put(0, "a", "1", 0, 1), get(1, "a", "1", true, 2, 3), del(0, "a", true, 4, 5), get(1, "a", "", false, 6, 7)}, true},
		{"concurrent read sees either", []porcupine.Operation{put(0, "a", "1", 0, 1), put(0, "a", "2", 2, 10), get(1, "a", "1", true, 3, 4), get(1, "a", "2", true, 5, 6)}, true},
		{"stale read", []porcupine.Operation{put(0, "a", "1", 0, 1), put(0, "a", "2", 2, 3), get(1, "a", "1", true, 4, 5)}, false},
		{"read after delete", []porcupine.Operation{put(0, "a", "1", 0, 1), del(0, "a", true, 2, 3), has(1, "a", true, 4, 5)}, false},
		{"delete of an absent key found it", []porcupine.Operation{del(0, "a", true, 0, 1)}, false},
		{"value never written", []porcupine.Operation{put(0, "a", "1", 0, 1), get(1, "a", "9", true, 2, 3)}, false},
		{"keys are independent", []porcupine.Operation{put(0, "a", "1", 0, 1), get(1, "b", "", false, 2, 3), put(0, "b", "2", 4, 5), get(1, "a", "1", true, 6, 7)}, true},
		{"pending put seen", []porcupine.Operation{unknown(put(0, "a", "1", 0, 100)), get(1, "a", "1", true, 5, 6)}, true},
		{"pending put not seen", []porcupine.Operation{unknown(put(0, "a", "1", 0, 100)), get(1, "a", "", false, 5, 6)}, true},
		{"pending delete", []porcupine.Operation{put(0, "a", "1", 0, 1), unknown(del(0, "a", false, 2, 100)), get(1, "a", "1", true, 5, 6), get(1, "a", "", false, 7, 8)}, true},
		{"pending put then flip-flop", []porcupine.Operation{unknown(put(0, "a", "1", 0, 100)), get(1, "a", "1", true, 5, 6), get(1, "a", "", false, 7, 8)}, false},
	} {
		if got := porcupine.CheckOperations(kvModel, tc.ops); got != tc.ok {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, got, tc.ok)
		}
	}
}
