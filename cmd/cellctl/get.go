package main

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/client"
)

func newGetCommand(g *globals) *cobra.Command {
	var b byteArg
	var valueOnly bool
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print the value of KEY",
		Long: `Print the value of KEY followed by a newline, byte for byte (with --hex:
KEY is hexadecimal and the value is printed in hexadecimal). A missing key
is an error: "key not found", exit status 1; with -w json, the error is
also printed on stdout as a JSON object:
{"error": "key not found", "code": "not_found", "key": "KEY"}.

-w table prints a KEY, VALUE and VERSION table, -w json and -w fields the
key, the value and the key's version (docs/transactions.md; none for a key
of a region written before versions, until its leader starts them). --print-value-only (etcdctl's) leaves the key out of the
simple and table outputs; simple prints only the value anyway.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := b.parse("key", args[0])
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
			kv, err := c.GetKV(ctx, key)
			if err != nil {
				return g.keyError(b, err, key)
			}
			v := kv.Value
			if g.output == formatSimple {
				return writeValue(g, v, b.hex)
			}
			res := newKVResult(b, key, v)
			res.Version = kv.Version
			return g.print(res, func() []*table {
				t := &table{left: true, header: []string{"KEY", "VALUE", "VERSION"}}
				t.add(b.cell(key), b.cell(v), versionCell(kv.Version))
				if valueOnly {
					t.header, t.rows = t.header[1:2], [][]string{{b.cell(v)}}
				}
				return []*table{t}
			})
		},
	}
	cmd.Flags().BoolVar(&b.hex, "hex", false, "KEY is hexadecimal, and the value is printed in hexadecimal")
	cmd.Flags().BoolVar(&valueOnly, "print-value-only", false, "print only the value (simple and table output)")
	return cmd
}

// versionCell is a version in a table: "-" when the key has none.
func versionCell(v uint64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprint(v)
}

// errorResult is the JSON error object that -w json prints on stdout for
// a missing key (the error line still goes to stderr).
type errorResult struct {
	Error  string `json:"error"`
	Code   string `json:"code"`
	Key    string `json:"key"`
	KeyHex string `json:"key_hex,omitempty"`
}

// keyError is byteArg.keyError that, with -w json, also prints a missing
// key's JSON error object on stdout.
func (g *globals) keyError(b byteArg, err error, key []byte) error {
	if g.output == formatJSON && errors.Is(err, client.ErrNotFound) {
		if perr := g.printJSON(errorResult{Error: "key not found", Code: "not_found", Key: b.text(key), KeyHex: b.binary(key)}); perr != nil {
			return perr
		}
	}
	return b.keyError(err, key)
}

// writeValue prints a value on its own line: its bytes, or hexadecimal.
func writeValue(g *globals, v []byte, asHex bool) error {
	if asHex {
		_, err := fmt.Fprintln(g.stdout, hex.EncodeToString(v))
		return err
	}
	if _, err := g.stdout.Write(v); err != nil {
		return err
	}
	_, err := fmt.Fprintln(g.stdout)
	return err
}
