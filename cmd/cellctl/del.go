package main

import (
	"github.com/spf13/cobra"
)

func newDelCommand(g *globals) *cobra.Command {
	var b byteArg
	var cf condFlags
	cmd := &cobra.Command{
		Use:     "del KEY",
		Aliases: []string{"delete"},
		Short:   "Delete KEY",
		Long: `Delete KEY. Prints OK; a missing key is an error: "key not found", exit
status 1 (with -w json, also a JSON error object on stdout, as get's).
With --hex, KEY is hexadecimal.

--if-version N deletes only if the key is at version N
(docs/transactions.md); otherwise nothing changes and del exits 1 with
"condition failed" and the key's current version (0: absent), as put's.`,
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
			cond, conditional, err := cf.cond()
			if err != nil {
				return err
			}
			if conditional {
				if err := c.DeleteIf(ctx, key, cond); err != nil {
					return g.condError(b, err, key)
				}
			} else if err := c.Delete(ctx, key); err != nil {
				return g.keyError(b, err, key)
			}
			res := newKVResult(b, key, nil)
			res.Deleted = true
			return g.printLine(res, "OK")
		},
	}
	cmd.Flags().BoolVar(&b.hex, "hex", false, "KEY is hexadecimal")
	cf.register(cmd, false)
	return cmd
}
