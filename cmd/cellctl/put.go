package main

import (
	"github.com/spf13/cobra"
)

func newPutCommand(g *globals) *cobra.Command {
	var b byteArg
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Store VALUE under KEY",
		Long: `Store VALUE under KEY, replacing any previous value. Prints OK.
With --hex, KEY and VALUE are hexadecimal ("6b6579", "0x6b6579").`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := b.parse("key", args[0])
			if err != nil {
				return err
			}
			value, err := b.parse("value", args[1])
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
			if err := c.Put(ctx, key, value); err != nil {
				return b.keyError(err, key)
			}
			res := newKVResult(b, key, nil)
			res.OK = true
			return g.printLine(res, "OK")
		},
	}
	cmd.Flags().BoolVar(&b.hex, "hex", false, "KEY and VALUE are hexadecimal")
	return cmd
}

// kvResult is the JSON output of put, get and del. Keys and values are
// strings, hexadecimal with --hex; KeyHex and ValueHex repeat them in
// hexadecimal when they are not valid UTF-8 (JSON strings cannot carry
// them exactly).
type kvResult struct {
	Key      string  `json:"key"`
	KeyHex   string  `json:"key_hex,omitempty"`
	Value    *string `json:"value,omitempty"`
	ValueHex string  `json:"value_hex,omitempty"`
	OK       bool    `json:"ok,omitempty"`
	Deleted  bool    `json:"deleted,omitempty"`
}

// newKVResult builds the JSON output for key (and value, unless nil).
func newKVResult(b byteArg, key, value []byte) kvResult {
	r := kvResult{Key: b.text(key), KeyHex: b.binary(key)}
	if value != nil {
		v := b.text(value)
		r.Value, r.ValueHex = &v, b.binary(value)
	}
	return r
}
