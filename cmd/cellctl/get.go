package main

import (
	"encoding/hex"
	"fmt"

	"github.com/spf13/cobra"
)

func newGetCommand(g *globals) *cobra.Command {
	var b byteArg
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print the value of KEY",
		Long: `Print the value of KEY followed by a newline, byte for byte (with --hex:
KEY is hexadecimal and the value is printed in hexadecimal). A missing key
is an error: "key not found", exit status 1.`,
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
			v, err := c.Get(ctx, key)
			if err != nil {
				return b.keyError(err, key)
			}
			if g.output == formatJSON {
				return g.printJSON(newKVResult(b, key, v))
			}
			return writeValue(g, v, b.hex)
		},
	}
	cmd.Flags().BoolVar(&b.hex, "hex", false, "KEY is hexadecimal, and the value is printed in hexadecimal")
	return cmd
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
