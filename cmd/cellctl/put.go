package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/wire"
)

func newPutCommand(g *globals) *cobra.Command {
	var b byteArg
	var cf condFlags
	cmd := &cobra.Command{
		Use:   "put KEY [VALUE|-]",
		Short: "Store VALUE (or standard input) under KEY",
		Long: `Store VALUE under KEY, replacing any previous value. Prints OK.

Without VALUE, or with VALUE "-", the value is read from standard input,
byte for byte (a trailing newline is part of it): "cellctl put k < file",
"printf v | cellctl put k". This is the way to store a value too long for
a command-line argument. (etcdctl stores a VALUE of "-" as it is; to
store "-" itself here, pipe it: printf - | cellctl put KEY.)

On a terminal, put says it is reading standard input: type the value
and end it with Ctrl-D.

With --hex, KEY and VALUE are hexadecimal ("6b6579", "0x6b6579"); a value
read from standard input is then hexadecimal text (spaces and newlines
ignored). Values longer than the store's limit (%d bytes) are refused
before anything is sent.

--if-version N and --if-absent make the put conditional
(docs/transactions.md): it applies only if the key is at version N (0:
absent) or absent, the test and the write one step of the key's region.
Otherwise nothing changes and put exits 1 with "condition failed" and the
key's current version (-w json: {"error": "condition failed", "code":
"condition_failed", "key": ..., "version": N} on stdout). A conditional
put prints the key's new version with -w json and -w fields.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := b.parse("key", args[0])
			if err != nil {
				return err
			}
			var value []byte
			if len(args) == 2 && args[1] != "-" {
				value, err = b.parse("value", args[1])
				if err == nil && len(value) > wire.MaxValueSize {
					err = fmt.Errorf("value of %d bytes is larger than the store's limit of %d bytes", len(value), wire.MaxValueSize)
				}
			} else {
				stdin := cmd.InOrStdin()
				if isTerminal(stdin) {
					fmt.Fprintf(cmd.ErrOrStderr(), "cellctl: reading the value of %s from standard input; end it with Ctrl-D (or give VALUE, or put KEY < FILE)\n", b.quoted(key))
				}
				value, err = readValue(stdin, b)
			}
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
			res := newKVResult(b, key, nil)
			if conditional {
				if res.Version, err = c.PutIf(ctx, key, value, cond); err != nil {
					return g.condError(b, err, key)
				}
			} else if err := c.Put(ctx, key, value); err != nil {
				return b.keyError(err, key)
			}
			res.OK = true
			return g.printLine(res, "OK")
		},
	}
	cmd.Long = fmt.Sprintf(cmd.Long, wire.MaxValueSize)
	cmd.Flags().BoolVar(&b.hex, "hex", false, "KEY and VALUE are hexadecimal")
	cf.register(cmd, true)
	return cmd
}

// readValue reads put's value from standard input, hexadecimal text with
// --hex. A value larger than the store's limit is refused with its size:
// what is past the limit is read and counted, not kept.
func readValue(r io.Reader, b byteArg) ([]byte, error) {
	limit := wire.MaxValueSize + 1
	if b.hex {
		limit = 3*wire.MaxValueSize + 64 // hex digits and some spacing
	}
	v, err := io.ReadAll(io.LimitReader(r, int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("read the value from standard input: %w", err)
	}
	if len(v) == limit {
		rest, err := io.Copy(io.Discard, r)
		if err != nil {
			return nil, fmt.Errorf("read the value from standard input: %w", err)
		}
		size := int64(len(v)) + rest
		if b.hex {
			return nil, fmt.Errorf("hexadecimal value of %d characters on standard input is larger than the store's limit of %d bytes", size, wire.MaxValueSize)
		}
		return nil, fmt.Errorf("value of %d bytes on standard input is larger than the store's limit of %d bytes", size, wire.MaxValueSize)
	}
	if !b.hex {
		return v, nil
	}
	text := strings.TrimPrefix(strings.Join(strings.Fields(string(v)), ""), "0x")
	value, err := hex.DecodeString(text)
	if err != nil {
		return nil, fmt.Errorf("the value on standard input is not hexadecimal: %w", err)
	}
	if len(value) > wire.MaxValueSize {
		return nil, fmt.Errorf("value of %d bytes on standard input is larger than the store's limit of %d bytes", len(value), wire.MaxValueSize)
	}
	return value, nil
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
	// Version is the key's version (docs/transactions.md §2); absent
	// from the output when its region has no versions yet.
	Version uint64 `json:"version,omitempty"`
	OK      bool   `json:"ok,omitempty"`
	Deleted bool   `json:"deleted,omitempty"`
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
