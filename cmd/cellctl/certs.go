package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/internal/tlsconf"
)

func newCertsCommand(g *globals) *cobra.Command {
	var (
		dir      string
		hosts    []string
		validFor time.Duration
	)
	cmd := &cobra.Command{
		Use:   "certs --dir DIR [--hosts h1,h2] [--valid-for 8760h]",
		Short: "Write a development CA and server, admin, client and etcd root certificates",
		Long: `Write into --dir a new certificate authority (ca.crt, ca.key) and the
certificates it issues, each with its key: server.crt (role cell-server,
valid for the names and addresses of --hosts; every server of a
development cluster may share it, as their client and peer certificate),
admin.crt (role cell-admin: check, dump and the operator commands too),
client.crt (role cell-client: reads and writes) and root.crt (role
cell-admin for Cell's servers; etcd's root user once its roles are on:
cellctl etcd-roles). Each certificate's CommonName is its etcd user name:
cell-server, cell-admin, cell-client, root. Keys are written 0600. An existing CA in --dir is not overwritten: certificates issued
from it stay valid. See docs/tls.md.

For development and tests; a production cluster uses its own CA.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return errors.New("--dir: no directory given")
			}
			if validFor <= 0 {
				return fmt.Errorf("--valid-for %v: want a positive duration", validFor)
			}
			var hs []string
			for _, h := range hosts {
				if h = strings.TrimSpace(h); h != "" {
					hs = append(hs, h)
				}
			}
			if err := tlsconf.WriteDevCerts(dir, hs, validFor); err != nil {
				return err
			}
			if len(hs) == 0 {
				hs = tlsconf.DefaultHosts
			}
			_, err := fmt.Fprintf(g.stdout, "wrote %s, %s, %s, %s and %s with their keys into %s (server valid for %s, until %s)\n",
				tlsconf.CAFile, tlsconf.ServerCertFile, tlsconf.AdminCertFile, tlsconf.ClientCertFile, tlsconf.RootCertFile, dir,
				strings.Join(hs, ","), time.Now().Add(validFor).UTC().Format(time.RFC3339))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory to write into (created 0700)")
	f.StringSliceVar(&hosts, "hosts", nil, "names and IP addresses the server certificate is valid for, comma-separated (default localhost,127.0.0.1,::1)")
	f.DurationVar(&validFor, "valid-for", 8760*time.Hour, "validity of the CA and the certificates")
	return cmd
}
