package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/regiontable"
)

func newEtcdRolesCommand(g *globals) *cobra.Command {
	var (
		users    []string
		devUsers bool
	)
	cmd := &cobra.Command{
		Use:   "etcd-roles [--user CN=role ...] [--dev-users=false]",
		Short: "Set up etcd's roles and users for Cell's certificates, and turn etcd's auth on",
		Long: `Set up etcd's role-based access control for Cell's identities in the etcd
at --endpoints, then turn its auth on (regiontable.EnableRoles): roles
cell-server and cell-admin read and write the region table (every key
under --etcd-prefix), cell-client only reads it; users without passwords
named by certificate CommonNames hold them, and the user root holds etcd's
root role. With auth on, etcd takes a client certificate's CommonName as
its user name, and admits a certificate only if that user exists.

--user CN=role adds a user for a certificate whose CommonName is CN
(node1.example.com=server, ops@example.com=admin, app1=client); repeat it
or separate with commas. --dev-users (default true) also adds the
CommonNames of cellctl certs' certificates: cell-server, cell-admin,
cell-client.

Run it once for an external etcd (a cellserver with an embedded etcd and
--client-cert-auth does it at start, --etcd-auth). While auth is off any
certificate of etcd's CAs may run it; once auth is on only root may (a
certificate with CommonName root, as cellctl certs' root.crt), to add or
move users. Running it again is harmless. See docs/tls.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			want, err := parseEtcdUsers(users, devUsers)
			if err != nil {
				return err
			}
			store, err := g.openTable()
			if err != nil {
				return err
			}
			defer store.Close()
			ctx, cancel := g.commandContext()
			defer cancel()
			res, err := regiontable.EnableRoles(ctx, store.Client(), regiontable.RolesOptions{Prefix: g.etcdPrefix, Users: want})
			if errors.Is(err, regiontable.ErrNotEtcdRoot) {
				return fmt.Errorf("%w (present a certificate with CommonName root: --cert root.crt --key root.key)", err)
			}
			if err != nil {
				return err
			}
			names := slices.Sorted(maps.Keys(want))
			for _, n := range names {
				fmt.Fprintf(g.stdout, "user %s: role %s\n", n, regiontable.EtcdRoleOf(want[n]))
			}
			fmt.Fprintf(g.stdout, "user %s: role root\n", regiontable.EtcdRootUser)
			switch {
			case res.Enabled:
				_, err = fmt.Fprintf(g.stdout, "etcd auth enabled: roles cell-server and cell-admin read and write %s/, cell-client reads it\n", g.etcdPrefix)
			default:
				_, err = fmt.Fprintf(g.stdout, "etcd auth was on already; roles and users written for %s/\n", g.etcdPrefix)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&users, "user", nil, "CN=role: an etcd user for certificates with CommonName CN, role server, admin or client (repeatable)")
	f.BoolVar(&devUsers, "dev-users", true, "also add users for the CommonNames of cellctl certs' certificates (cell-server, cell-admin, cell-client)")
	return cmd
}

// parseEtcdUsers turns --user's CN=role entries (and the development
// users, with dev) into EnableRoles' users.
func parseEtcdUsers(entries []string, dev bool) (map[string]tlsconf.Role, error) {
	users := map[string]tlsconf.Role{}
	if dev {
		users = regiontable.DevEtcdUsers()
	}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		cn, role, ok := strings.Cut(e, "=")
		cn = strings.TrimSpace(cn)
		if !ok || cn == "" {
			return nil, fmt.Errorf("--user %q: want CN=role, e.g. node1.example.com=server", e)
		}
		if cn == regiontable.EtcdRootUser {
			return nil, fmt.Errorf("--user %q: root is etcd's own superuser, always created", e)
		}
		r, err := regiontable.ParseEtcdRole(role)
		if err != nil {
			return nil, fmt.Errorf("--user %q: role %q: want server, admin or client", e, role)
		}
		users[cn] = r
	}
	if len(users) == 0 {
		return nil, errors.New("no users: give --user CN=role, or keep --dev-users")
	}
	return users, nil
}
