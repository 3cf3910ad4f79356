package drill

import (
	"fmt"
	"slices"

	"github.com/anishathalye/porcupine"
)

// The register model porcupine checks each key's history against: a key
// is absent or holds one value; a get returns it, a put replaces it, a
// delete removes it and says whether it was there. An Unknown write is
// recorded as returning after every other operation (pending), with no
// output to match: the checker may linearize it anywhere after its invoke,
// including after the last read (never observed).

// modelInput and modelOutput are the porcupine input and output of an Op.
type modelInput struct {
	Kind  Kind
	Key   string
	Value string // put
}

type modelOutput struct {
	Found   bool
	Value   string
	Unknown bool
}

// modelState is one key's state; comparable, so porcupine's == works.
type modelState struct {
	present bool
	value   string
}

// Model is the per-key register model (partitioned by key).
var Model = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() any { return modelState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(modelState), input.(modelInput), output.(modelOutput)
		switch in.Kind {
		case Get:
			return out.Found == st.present && (!out.Found || out.Value == st.value), st
		case Put:
			return true, modelState{present: true, value: in.Value}
		case Delete:
			return out.Unknown || out.Found == st.present, modelState{}
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(modelInput), output.(modelOutput)
		switch {
		case out.Unknown:
			return fmt.Sprintf("%s(%s, %q) -> unknown", in.Kind, in.Key, in.Value)
		case in.Kind == Get && out.Found:
			return fmt.Sprintf("get(%s) -> %q", in.Key, out.Value)
		case in.Kind == Put:
			return fmt.Sprintf("put(%s, %q)", in.Key, in.Value)
		}
		return fmt.Sprintf("%s(%s) -> found=%v", in.Kind, in.Key, out.Found)
	},
	DescribeState: func(state any) string {
		st := state.(modelState)
		if !st.present {
			return "absent"
		}
		return fmt.Sprintf("%q", st.value)
	},
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range history {
		k := op.Input.(modelInput).Key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	slices.Sort(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

// porcupineHistory converts ops to porcupine operations: Failed operations
// are left out (they had no effect and returned nothing), Unknown writes
// return after everything else.
func porcupineHistory(ops []Op) []porcupine.Operation {
	out := make([]porcupine.Operation, 0, len(ops))
	var end int64
	for _, op := range ops {
		end = max(end, int64(op.Call), int64(op.Return))
	}
	for _, op := range ops {
		in := modelInput{Kind: op.Kind, Key: op.Key}
		if op.Kind == Put {
			in.Value = op.Value
		}
		p := porcupine.Operation{ClientId: op.Client, Input: in, Call: int64(op.Call), Return: int64(op.Return)}
		switch op.Outcome {
		case Failed:
			continue
		case Unknown:
			p.Output, p.Return = modelOutput{Unknown: true}, end+1
		default:
			p.Output = modelOutput{Found: op.Found, Value: op.Value}
		}
		out = append(out, p)
	}
	return out
}
