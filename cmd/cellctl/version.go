package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/internal/buildinfo"
)

// version is set at link time (-ldflags "-X main.version=...", as the
// Makefile's images target does).
var version = "dev"

func newVersionCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print cellctl's version and VCS revision",
		Long: `Print cellctl's build: its version (the link's -X main.version, else the
module version go build stamps, else "dev"), the VCS revision it was
built from, that revision's time, whether the tree was modified, and the
Go version. cellserver --version prints the same for the server; members
lists the version each server publishes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := buildinfo.Read(version)
			switch g.output {
			case formatSimple:
				_, err := io.WriteString(g.stdout, in.String("cellctl"))
				return err
			case formatTable:
				fields, err := jsonFields(in)
				if err != nil {
					return err
				}
				t := &table{left: true, header: []string{"FIELD", "VALUE"}}
				for _, f := range fields {
					t.add(f.name, f.text)
				}
				return t.writeBordered(g.stdout)
			}
			return g.print(in, nil)
		},
	}
}
