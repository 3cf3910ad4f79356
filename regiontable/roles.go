package regiontable

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cellstore/cell/internal/tlsconf"
)

// etcd's role-based access control for Cell's identities (docs/tls.md,
// "etcd roles"). With auth on, etcd takes the CommonName of a verified
// client certificate as the user name; that user's roles decide which key
// ranges it may read and write. EnableRoles sets up one etcd role per Cell
// role:
//
//   - cell-server: read and write the table (every key under the prefix:
//     members and their leases, regions, the root pointer, region IDs,
//     draining marks, the coordinator election's keys);
//   - cell-admin: the same (cellctl drain writes draining marks; the other
//     admin commands read the table and talk to the servers);
//   - cell-client: read the table only (the Go client and cellctl's data
//     commands read regions, members and the root, and watch them).
//
// Nothing else in etcd is granted: Cell's servers, client, cellctl and
// cellprobe use no key outside the prefix (cellprobe asks etcd's /health,
// which needs no user).
const (
	EtcdRoleServer = "cell-server"
	EtcdRoleAdmin  = "cell-admin"
	EtcdRoleClient = "cell-client"
	// EtcdRootUser is etcd's superuser, which it requires before auth is
	// enabled: the only identity that may change users and roles once auth
	// is on (a certificate with CommonName "root").
	EtcdRootUser = "root"
	etcdRootRole = "root"
)

// ErrNotEtcdRoot is EnableRoles' error when etcd's auth is on and the
// caller's identity is not etcd's root user: only root may change users
// and roles then.
var ErrNotEtcdRoot = errors.New("regiontable: etcd auth is on and this identity is not etcd's root user")

// EtcdRoleOf is the etcd role of a Cell role: "cell-server", "cell-admin",
// "cell-client"; "" for RoleNone.
func EtcdRoleOf(r tlsconf.Role) string {
	switch r {
	case tlsconf.RoleServer:
		return EtcdRoleServer
	case tlsconf.RoleAdmin:
		return EtcdRoleAdmin
	case tlsconf.RoleClient:
		return EtcdRoleClient
	}
	return ""
}

// ParseEtcdRole parses a role as cellctl's flags name it: "server",
// "admin", "client" or the etcd role names "cell-server", "cell-admin",
// "cell-client".
func ParseEtcdRole(s string) (tlsconf.Role, error) {
	switch strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "cell-") {
	case "server":
		return tlsconf.RoleServer, nil
	case "admin":
		return tlsconf.RoleAdmin, nil
	case "client":
		return tlsconf.RoleClient, nil
	}
	return tlsconf.RoleNone, fmt.Errorf("regiontable: role %q: want server, admin or client: %w", s, ErrInvalid)
}

// DevEtcdUsers are the etcd users of the development certificates
// (tlsconf.WriteDevCerts): each certificate's CommonName with its role.
func DevEtcdUsers() map[string]tlsconf.Role {
	return map[string]tlsconf.Role{
		EtcdRoleServer: tlsconf.RoleServer,
		EtcdRoleAdmin:  tlsconf.RoleAdmin,
		EtcdRoleClient: tlsconf.RoleClient,
	}
}

// RolesOptions configure EnableRoles.
type RolesOptions struct {
	// Prefix is the table's key prefix, as EtcdOptions.Prefix. Default
	// "/cell".
	Prefix string
	// Users are the etcd users to create, by certificate CommonName, with
	// their roles (a user given another Cell role before is moved to this
	// one). Default DevEtcdUsers(). "root" may not be one of them: it is
	// always created, with etcd's root role.
	Users map[string]tlsconf.Role
	// IfAuthOff makes EnableRoles do nothing, quietly, when etcd's auth is
	// on already (or is turned on by another caller meanwhile): what a
	// server does at bootstrap. Otherwise roles and users are written
	// again, which needs etcd's root identity once auth is on.
	IfAuthOff bool
}

// RolesResult says what EnableRoles did.
type RolesResult struct {
	// WasOn: etcd's auth was on before EnableRoles turned it on (or
	// another caller turned it on meanwhile).
	WasOn bool
	// Configured: the roles and users were written.
	Configured bool
	// Enabled: this call turned auth on.
	Enabled bool
}

// EnableRoles sets up etcd's roles and users for Cell's identities (see
// EtcdRoleServer) on the table under opts.Prefix, with the root user etcd
// requires, then turns etcd's auth on. It is idempotent, and safe when
// several servers run it at once: existing roles and users are kept (and
// permissions granted again), and a caller that finds auth on without
// being root stops, quietly with IfAuthOff, else with ErrNotEtcdRoot.
// Once auth is on, etcd admits a client certificate only if a user named
// by its CommonName exists.
func EnableRoles(ctx context.Context, cli *clientv3.Client, opts RolesOptions) (RolesResult, error) {
	var res RolesResult
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !strings.HasPrefix(opts.Prefix, "/") || strings.HasSuffix(opts.Prefix, "/") {
		return res, fmt.Errorf("regiontable: prefix %q must start and not end with '/': %w", opts.Prefix, ErrInvalid)
	}
	users := opts.Users
	if users == nil {
		users = DevEtcdUsers()
	}
	for name, r := range users {
		if name == "" || name == EtcdRootUser {
			return res, fmt.Errorf("regiontable: etcd user %q: not a user EnableRoles may create: %w", name, ErrInvalid)
		}
		if EtcdRoleOf(r) == "" {
			return res, fmt.Errorf("regiontable: etcd user %q: role %v: %w", name, r, ErrInvalid)
		}
	}
	st, err := cli.AuthStatus(ctx)
	switch {
	case notRoot(err):
		// Only root may ask once auth is on.
		res.WasOn = true
		if opts.IfAuthOff {
			return res, nil
		}
		return res, fmt.Errorf("%w: %w", ErrNotEtcdRoot, err)
	case err != nil:
		return res, fmt.Errorf("regiontable: etcd auth status: %w", err)
	}
	res.WasOn = st.Enabled
	if st.Enabled && opts.IfAuthOff {
		return res, nil
	}
	if err := configureRoles(ctx, cli, opts.Prefix, users); err != nil {
		if notRoot(err) {
			// Another caller turned auth on meanwhile.
			res.WasOn = true
			if opts.IfAuthOff {
				return res, nil
			}
			return res, fmt.Errorf("%w: %w", ErrNotEtcdRoot, err)
		}
		return res, err
	}
	res.Configured = true
	if st.Enabled {
		return res, nil
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		if notRoot(err) {
			res.WasOn = true
			if opts.IfAuthOff {
				return res, nil
			}
			return res, fmt.Errorf("%w: %w", ErrNotEtcdRoot, err)
		}
		return res, fmt.Errorf("regiontable: etcd auth enable: %w", err)
	}
	res.Enabled = true
	return res, nil
}

// notRoot reports whether err is etcd's refusal of an auth operation to a
// caller that is not root (or whose certificate names no user).
func notRoot(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrUserEmpty) ||
		errors.Is(err, rpctypes.ErrUserNotFound)
}

// configureRoles creates the roles, their permissions on the table and the
// users, keeping whatever exists.
func configureRoles(ctx context.Context, cli *clientv3.Client, prefix string, users map[string]tlsconf.Role) error {
	key := prefix + "/"
	end := clientv3.GetPrefixRangeEnd(key)
	for _, rp := range []struct {
		role string
		perm clientv3.PermissionType
	}{
		{EtcdRoleServer, clientv3.PermissionType(clientv3.PermReadWrite)},
		{EtcdRoleAdmin, clientv3.PermissionType(clientv3.PermReadWrite)},
		{EtcdRoleClient, clientv3.PermissionType(clientv3.PermRead)},
	} {
		if _, err := cli.RoleAdd(ctx, rp.role); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
			return fmt.Errorf("regiontable: etcd role add %s: %w", rp.role, err)
		}
		if _, err := cli.RoleGrantPermission(ctx, rp.role, key, end, rp.perm); err != nil {
			return fmt.Errorf("regiontable: etcd role %s grant %v on [%s, %s): %w", rp.role, rp.perm, key, end, err)
		}
	}
	if err := addUser(ctx, cli, EtcdRootUser, etcdRootRole, nil); err != nil {
		return err
	}
	cellRoles := []string{EtcdRoleServer, EtcdRoleAdmin, EtcdRoleClient}
	for _, name := range slices.Sorted(maps.Keys(users)) {
		role := EtcdRoleOf(users[name])
		others := slices.DeleteFunc(slices.Clone(cellRoles), func(r string) bool { return r == role })
		if err := addUser(ctx, cli, name, role, others); err != nil {
			return err
		}
	}
	return nil
}

// addUser creates user name without a password (it authenticates by its
// certificate) unless it exists, grants it role and revokes the roles of
// revoke that it holds.
func addUser(ctx context.Context, cli *clientv3.Client, name, role string, revoke []string) error {
	if _, err := cli.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("regiontable: etcd user add %s: %w", name, err)
	}
	if len(revoke) > 0 {
		u, err := cli.UserGet(ctx, name)
		if err != nil {
			return fmt.Errorf("regiontable: etcd user get %s: %w", name, err)
		}
		for _, r := range u.Roles {
			if !slices.Contains(revoke, r) {
				continue
			}
			if _, err := cli.UserRevokeRole(ctx, name, r); err != nil && !errors.Is(err, rpctypes.ErrRoleNotGranted) {
				return fmt.Errorf("regiontable: etcd user %s revoke role %s: %w", name, r, err)
			}
		}
	}
	if _, err := cli.UserGrantRole(ctx, name, role); err != nil {
		return fmt.Errorf("regiontable: etcd user %s grant role %s: %w", name, role, err)
	}
	return nil
}
