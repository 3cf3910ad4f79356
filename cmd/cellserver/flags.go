package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/server"
)

// config is the parsed command line: the server's options that flags set,
// and what cellserver itself needs (etcd, TLS files, logging). Its flags
// are the table of options.go.
type config struct {
	// srv holds the flags that set server.Options; serverOptions adds
	// the rest (the region table, TLS configurations, logger, version).
	srv            server.Options
	etcdEndpoints  []string
	etcdListen     string
	etcdPeerListen string
	etcdName       string
	etcdCluster    string
	etcdPrefix     string
	leaseTTL       time.Duration
	logLevel       slog.Level
	// TLS (docs/tls.md), in etcd's terms: the RPC port's files, and the
	// peer files this server presents and verifies when it calls other
	// servers and serves on its raft port.
	tls, peerTLS tlsconf.Files
	// etcdAuth: turn etcd's roles on at start; etcdAuthFlag is
	// --etcd-auth as given, nil when not (check decides).
	etcdAuth     bool
	etcdAuthFlag *bool
	// --provider and the fabric flags, which check makes srv.Fabric of.
	provider, fabricProviders, fabricAddr, fabricProgress string
}

// errHelp is returned for -h: usage was printed, exit 0.
var errHelp = errors.New("help requested")

// errVersion is returned for --version: print the build, exit 0.
var errVersion = errors.New("version requested")

// parseFlags parses args. Every flag's default comes from its environment
// variable when that is set, and the command line overrides both.
func parseFlags(args []string, out io.Writer) (*config, error) {
	fs := flag.NewFlagSet("cellserver", flag.ContinueOnError)
	fs.SetOutput(out)
	var cfg config
	opts := flatten(cfg.options())
	texts := make([]string, len(opts))
	for i := range opts {
		opts[i].register(fs, &texts[i])
	}
	showVersion := fs.Bool("version", false, "print the version and VCS revision, then exit")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: cellserver [flags]\n       cellserver wipe [--data-dir DIR] [--shm-dir DIR]\n\nRuns a Cell server. With no flags it is a complete single-node store:\nan embedded etcd and the server, with data under ./cell-data.\n'cellserver wipe' deletes a stopped server's data directory and its\nregion files (in --shm-dir and hugetlbfs too).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, err
	}
	if *showVersion {
		return nil, errVersion
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for i := range opts {
		if err := opts[i].apply(texts[i]); err != nil {
			return nil, err
		}
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// flatten lists the options of groups in order.
func flatten(groups []optionGroup) []option {
	var opts []option
	for _, g := range groups {
		opts = append(opts, g.options...)
	}
	return opts
}

// check applies the rules that join several flags, and the defaults
// derived from other flags.
func (c *config) check() error {
	if err := c.checkTLS(); err != nil {
		return err
	}
	if err := c.checkEtcdAuth(); err != nil {
		return err
	}
	if err := c.checkFabric(); err != nil {
		return err
	}
	if c.srv.ServerID == "" {
		c.srv.ServerID = server.DefaultServerID(c.srv.Listen)
	}
	if c.etcdCluster != "" {
		if len(c.etcdEndpoints) > 0 {
			return fmt.Errorf("--etcd-initial-cluster starts an embedded etcd member; --etcd-endpoints uses an external etcd: give one of them")
		}
		if c.etcdName == "" {
			c.etcdName = c.srv.ServerID
		}
		if !slices.ContainsFunc(strings.Split(c.etcdCluster, ","), func(m string) bool { return strings.HasPrefix(strings.TrimSpace(m), c.etcdName+"=") }) {
			return fmt.Errorf("--etcd-initial-cluster %q has no member named %q (--etcd-name)", c.etcdCluster, c.etcdName)
		}
	}
	return nil
}

// checkFabric makes srv.Fabric of --provider and the fabric flags: an
// endpoint per --fabric-provider with --provider fabric.
func (c *config) checkFabric() error {
	c.srv.Fabric = nil
	if c.provider != rdma.ProviderFabric {
		return nil
	}
	if !rdma.FabricBuilt {
		return fmt.Errorf("--provider fabric: this cellserver was built without libfabric (build with -tags libfabric, libfabric-dev installed)")
	}
	seen := map[string]bool{}
	for _, p := range strings.Split(c.fabricProviders, ",") {
		p = strings.TrimSpace(p)
		lf := rdma.LibfabricName(p)
		if seen[lf] {
			return fmt.Errorf("--fabric-provider %q: %s twice", c.fabricProviders, p)
		}
		seen[lf] = true
		o := rdma.FabricOptions{Provider: p, Progress: c.fabricProgress}
		if lf != "shm" {
			o.Node = c.fabricAddr
		}
		v := o
		v.EnsureDefaults()
		if err := v.Validate(); err != nil {
			return fmt.Errorf("--fabric-provider %q, --fabric-progress %q: %w", p, c.fabricProgress, err)
		}
		c.srv.Fabric = append(c.srv.Fabric, o)
	}
	return nil
}

// lookupGroup resolves a group name or numeric ID to a group ID; "" is 0
// (none). A numeric ID need not name a group in /etc/group.
func lookupGroup(name string) (int, error) {
	if name == "" {
		return 0, nil
	}
	if gid, err := strconv.Atoi(name); err == nil {
		if gid < 1 {
			return 0, fmt.Errorf("want a group other than root's (ID >= 1)")
		}
		return gid, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, err
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil || gid < 1 {
		return 0, fmt.Errorf("group ID %q: want a number >= 1", g.Gid)
	}
	return gid, nil
}

// checkTLS checks the TLS flags: each endpoint's files together, and
// those the RPC port needs. Certificate files are read at start (a
// missing one fails it) and again whenever they change.
func (c *config) checkTLS() error {
	if err := c.tls.Validate(); err != nil {
		return fmt.Errorf("--cert-file, --key-file, --trusted-ca-file, --client-cert-auth: %w", err)
	}
	if err := c.peerTLS.Validate(); err != nil {
		return fmt.Errorf("--peer-cert-file, --peer-key-file, --peer-trusted-ca-file, --peer-client-cert-auth: %w", err)
	}
	switch {
	case c.tls.Enabled() && c.tls.CertFile == "":
		return errors.New("--trusted-ca-file or --client-cert-auth without --cert-file: the RPC port serves TLS only with a certificate")
	case c.tls.Enabled() && !c.peerTLS.Enabled():
		return errors.New("--cert-file without --peer-trusted-ca-file (and --peer-cert-file, --peer-key-file where servers require client certificates): this server could not call the other servers' TLS ports")
	case c.peerTLS.CertFile != "" && c.peerTLS.TrustedCAFile == "":
		return errors.New("--peer-cert-file without --peer-trusted-ca-file: raft over TLS verifies every peer's certificate")
	}
	return nil
}

// checkEtcdAuth decides --etcd-auth: unset, it is true with an embedded
// etcd whose client port requires client certificates and a certificate
// of this server's to present, false otherwise. On, it needs that etcd
// knows who calls: client certificates required and this server's
// certificate (--peer-cert-file) to present.
func (c *config) checkEtcdAuth() error {
	if c.etcdAuthFlag == nil {
		c.etcdAuth = len(c.etcdEndpoints) == 0 && c.tls.ClientCertAuth && c.peerTLS.CertFile != ""
		return nil
	}
	c.etcdAuth = *c.etcdAuthFlag
	switch {
	case !c.etcdAuth:
	case len(c.etcdEndpoints) == 0 && !c.tls.ClientCertAuth:
		return errors.New("--etcd-auth without --client-cert-auth: etcd names its users by client certificates, which the embedded etcd then does not ask for")
	case c.peerTLS.CertFile == "":
		return errors.New("--etcd-auth without --peer-cert-file: this server would have no certificate to present to etcd")
	}
	return nil
}

// parseSize parses a byte size: a whole number with an optional suffix
// K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB (all powers of 1024, any case).
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	num, suffix := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	var shift uint
	switch strings.TrimSuffix(strings.TrimSuffix(suffix, "b"), "i") {
	case "":
		if suffix == "b" || suffix == "" {
			shift = 0
		} else {
			return 0, fmt.Errorf("unknown unit %q", suffix)
		}
	case "k":
		shift = 10
	case "m":
		shift = 20
	case "g":
		shift = 30
	case "t":
		shift = 40
	default:
		return 0, fmt.Errorf("unknown unit %q", suffix)
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || v == 0 {
		return 0, errors.New("want a positive whole number with an optional unit (KiB, MiB, GiB)")
	}
	if v > (1<<63)>>shift {
		return 0, errors.New("too large")
	}
	return v << shift, nil
}

// wipeConfig is the command line of 'cellserver wipe'.
type wipeConfig struct {
	dataDir, shmDir string
}

// parseWipeFlags parses the flags of 'cellserver wipe' (after the word).
func parseWipeFlags(args []string, out io.Writer) (*wipeConfig, error) {
	fs := flag.NewFlagSet("cellserver wipe", flag.ContinueOnError)
	fs.SetOutput(out)
	var cfg wipeConfig
	var c config
	table := flatten(c.options())
	for _, f := range []struct {
		name, help string
		p          *string
	}{
		{"data-dir", "the data directory to delete, with its region files", &cfg.dataDir},
		{"shm-dir", "the tmpfs directory the server's region files may be in", &cfg.shmDir},
	} {
		i := slices.IndexFunc(table, func(o option) bool { return o.name == f.name })
		o := table[i]
		o.help = f.help
		o.register(fs, f.p)
	}
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: cellserver wipe [--data-dir DIR] [--shm-dir DIR]\n\nDeletes the data directory of a stopped server (log, snapshots, embedded\netcd data) and every region file named after it in --shm-dir, the hugetlbfs\nmounts and the directory itself, also when the directory was deleted\nalready. Refused while a server runs on the directory.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return &cfg, nil
}
