package main

import (
	"bytes"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/client"
)

// rangeFlags are the options of cellctl range.
type rangeFlags struct {
	b        byteArg
	limit    int
	prefix   bool
	reverse  bool
	keysOnly bool
	// valuesOnly is --print-value-only: the simple and table outputs
	// leave the keys out.
	valuesOnly bool
}

// bounds computes the range [start, end) the arguments ask for. A nil
// bound is unbounded.
func (f *rangeFlags) bounds(args []string) (start, end []byte, err error) {
	if start, err = f.b.parse("start key", args[0]); err != nil {
		return nil, nil, err
	}
	switch {
	case f.prefix && len(args) > 1:
		return nil, nil, fmt.Errorf("--prefix takes no END (the range is every key starting with START)")
	case f.prefix:
		end = prefixEnd(start)
	case len(args) > 1:
		if end, err = f.b.parse("end key", args[1]); err != nil {
			return nil, nil, err
		}
		if len(end) == 0 {
			end = nil
		}
	}
	if len(start) == 0 {
		start = nil
	}
	if f.limit < 0 {
		return nil, nil, fmt.Errorf("--limit %d: want 0 (no limit) or more", f.limit)
	}
	if f.keysOnly && f.valuesOnly {
		return nil, nil, fmt.Errorf("--keys-only and --print-value-only: choose one")
	}
	if start != nil && end != nil && bytes.Compare(start, end) > 0 {
		return nil, nil, fmt.Errorf("START %s is after END %s: the range [START, END) would be empty (with --reverse too: END stays the upper bound)", f.b.quoted(start), f.b.quoted(end))
	}
	return start, end, nil
}

// prefixEnd returns the smallest key above every key starting with p, or
// nil (unbounded) when there is none (p empty or all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// rangeResult is the JSON output of range.
type rangeResult struct {
	Pairs []rangePair `json:"pairs"`
	Count int         `json:"count"`
	// More is set when --limit stopped the range; Resume is where the
	// next page starts (pass it as START, or as END with --reverse).
	More   bool   `json:"more"`
	Resume string `json:"resume,omitempty"`
}

// rangePair is one pair, as kvResult prints it.
type rangePair struct {
	Key      string  `json:"key"`
	KeyHex   string  `json:"key_hex,omitempty"`
	Value    *string `json:"value,omitempty"`
	ValueHex string  `json:"value_hex,omitempty"`
	Version  uint64  `json:"version,omitempty"`
}

func newRangeCommand(g *globals) *cobra.Command {
	var f rangeFlags
	cmd := &cobra.Command{
		Use:   "range START [END]",
		Short: "List the keys in [START, END), with their values",
		Long: `List the pairs with START <= key < END in key order (descending with
--reverse). An empty START ("") starts at the first key; without END the
range goes to the last key; a START after END is an error. With --prefix, the range is every key that
starts with START. --limit bounds the pairs printed; when it stops the
range, the key to resume at is printed after them.

The simple output is a KEY and VALUE table with aligned columns (keys and
values quoted when they hold spaces or control characters), -w table the
same with borders; -w json and -w fields give each key's version too; --keys-only and --print-value-only print one column,
a key or a value a line without a header (-w table keeps it).`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			start, end, err := f.bounds(args)
			if err != nil {
				return err
			}
			ctx, cancel := g.commandContext()
			defer cancel()
			c, err := g.openClient(ctx, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			pairs, resume, err := c.Range(ctx, start, end, client.RangeOptions{Limit: f.limit, Reverse: f.reverse, KeysOnly: f.keysOnly,
				Versions: g.output == formatJSON || g.output == formatFields})
			if err != nil {
				return f.b.keyError(err, start)
			}
			return g.print(rangeOutput(f, pairs, resume), func() []*table { return rangeTables(f, pairs, resume) })
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&f.b.hex, "hex", false, "START and END are hexadecimal, and keys and values are printed in hexadecimal")
	fs.IntVar(&f.limit, "limit", 0, "most pairs to print (0: no limit)")
	fs.BoolVar(&f.prefix, "prefix", false, "list the keys starting with START")
	fs.BoolVar(&f.reverse, "reverse", false, "descending key order")
	fs.BoolVar(&f.keysOnly, "keys-only", false, "print keys only (the values are not fetched)")
	fs.BoolVar(&f.valuesOnly, "print-value-only", false, "print values only (simple and table output; json and fields keep the keys)")
	return cmd
}

func rangeOutput(f rangeFlags, pairs []client.KV, resume []byte) rangeResult {
	res := rangeResult{Pairs: make([]rangePair, len(pairs)), Count: len(pairs), More: resume != nil}
	for i, kv := range pairs {
		var value []byte
		if !f.keysOnly {
			value = kv.Value
			if value == nil {
				value = []byte{}
			}
		}
		r := newKVResult(f.b, kv.Key, value)
		res.Pairs[i] = rangePair{Key: r.Key, KeyHex: r.KeyHex, Value: r.Value, ValueHex: r.ValueHex, Version: kv.Version}
	}
	if resume != nil {
		res.Resume = f.b.text(resume)
	}
	return res
}

func rangeTables(f rangeFlags, pairs []client.KV, resume []byte) []*table {
	t := &table{left: true, header: []string{"KEY", "VALUE"}}
	switch {
	case f.keysOnly:
		t.header, t.list = []string{"KEY"}, true
	case f.valuesOnly:
		t.header, t.list = []string{"VALUE"}, true
	}
	for _, kv := range pairs {
		switch {
		case f.keysOnly:
			t.add(f.b.cell(kv.Key))
		case f.valuesOnly:
			t.add(f.b.cell(kv.Value))
		default:
			t.add(f.b.cell(kv.Key), f.b.cell(kv.Value))
		}
	}
	switch {
	case resume != nil && f.reverse:
		t.notes = append(t.notes, fmt.Sprintf("(--limit %d reached; more below %s: pass it as END)", f.limit, f.b.cell(resume)))
	case resume != nil:
		t.notes = append(t.notes, fmt.Sprintf("(--limit %d reached; more from %s)", f.limit, f.b.cell(resume)))
	}
	return []*table{t}
}
