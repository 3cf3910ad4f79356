package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/client"
)

// condFlags are put's and del's conditions (docs/transactions.md §3):
// --if-version N (N = 0: the key is absent) and --if-absent.
type condFlags struct {
	version  uint64
	absent   bool
	versionF *cobra.Command // the command, to tell whether --if-version was given
}

func (f *condFlags) register(cmd *cobra.Command, absent bool) {
	f.versionF = cmd
	cmd.Flags().Uint64Var(&f.version, "if-version", 0, "apply only if the key is at this version (0: absent); else exit 1, \"condition failed\"")
	if absent {
		cmd.Flags().BoolVar(&f.absent, "if-absent", false, "apply only if the key is absent; else exit 1, \"condition failed\"")
	}
}

// cond returns the condition the flags ask for, if any.
func (f *condFlags) cond() (client.Cond, bool, error) {
	given := f.versionF.Flags().Changed("if-version")
	switch {
	case given && f.absent:
		return client.Cond{}, false, fmt.Errorf("--if-version and --if-absent: choose one")
	case given:
		return client.IfVersion(f.version), true, nil
	case f.absent:
		return client.IfAbsent(), true, nil
	}
	return client.Cond{}, false, nil
}

// condResult is the JSON error object that -w json prints on stdout for a
// condition that did not hold (the error line still goes to stderr).
type condResult struct {
	Error   string `json:"error"`
	Code    string `json:"code"`
	Key     string `json:"key"`
	KeyHex  string `json:"key_hex,omitempty"`
	Version uint64 `json:"version"`
}

// condError reports a failed condition: the key's current version (0:
// absent), also as a JSON object on stdout with -w json. Other errors go
// to keyError.
func (g *globals) condError(b byteArg, err error, key []byte) error {
	var cf *client.ConditionFailedError
	if !errors.As(err, &cf) {
		return g.keyError(b, err, key)
	}
	if g.output == formatJSON {
		if perr := g.printJSON(condResult{Error: "condition failed", Code: "condition_failed", Key: b.text(key), KeyHex: b.binary(key), Version: cf.Version}); perr != nil {
			return perr
		}
	}
	if cf.Version == 0 {
		return fmt.Errorf("condition failed: %s is absent", b.quoted(key))
	}
	return fmt.Errorf("condition failed: %s is at version %d", b.quoted(key), cf.Version)
}
