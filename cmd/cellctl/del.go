package main

import (
	"github.com/spf13/cobra"
)

func newDelCommand(g *globals) *cobra.Command {
	var b byteArg
	cmd := &cobra.Command{
		Use:     "del KEY",
		Aliases: []string{"delete"},
		Short:   "Delete KEY",
		Long: `Delete KEY. Prints OK; a missing key is an error: "key not found", exit
status 1 (with -w json, also a JSON error object on stdout, as get's).
With --hex, KEY is hexadecimal.`,
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
			if err := c.Delete(ctx, key); err != nil {
				return g.keyError(b, err, key)
			}
			res := newKVResult(b, key, nil)
			res.Deleted = true
			return g.printLine(res, "OK")
		},
	}
	cmd.Flags().BoolVar(&b.hex, "hex", false, "KEY is hexadecimal")
	return cmd
}
