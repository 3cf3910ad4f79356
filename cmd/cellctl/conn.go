package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cellstore/cell/blink"
	"github.com/cellstore/cell/client"
	"github.com/cellstore/cell/internal/tlsconf"
	"github.com/cellstore/cell/regiontable"
	"github.com/cellstore/cell/wire"
)

// Connections shared by the subcommands: a client.Client for data
// commands, the region table and wire connections for status and dump.

// quietLogger drops the library's logs: cellctl reports failures itself,
// once, on one line.
var quietLogger = slog.New(slog.DiscardHandler)

// commandContext returns the context of one command: it ends after
// --command-timeout (0: never).
func (g *globals) commandContext() (context.Context, context.CancelFunc) {
	if g.timeout <= 0 {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeout(context.Background(), g.timeout)
}

// clientConfig is the client configuration of --endpoints and
// --etcd-prefix.
func (g *globals) clientConfig() (client.Config, error) {
	eps, err := g.etcdEndpoints()
	if err != nil {
		return client.Config{}, err
	}
	tc, err := g.serverTLS()
	if err != nil {
		return client.Config{}, err
	}
	return client.Config{Endpoints: eps, EtcdPrefix: g.etcdPrefix, Logger: quietLogger, DialTimeout: g.dialTimeout, TLS: tc,
		EtcdTLS: etcdTLS(eps, tc)}, nil
}

// etcdTLS is the TLS configuration of the etcd connection: --cacert,
// --cert and --key, as etcdctl takes them, when an endpoint is https://
// (etcd then serves TLS, with the servers' CA in a development cluster);
// nil for http:// and bare host:port endpoints.
func etcdTLS(eps []string, tc *tls.Config) *tls.Config {
	for _, ep := range eps {
		if strings.HasPrefix(ep, "https://") {
			return tc
		}
	}
	return nil
}

// serverTLS is the TLS configuration of --cacert, --cert and --key for
// Cell's servers, nil when none is given. It is built once.
func (g *globals) serverTLS() (*tls.Config, error) {
	g.tlsOnce.Do(func() {
		f := tlsconf.Files{CertFile: g.cert, KeyFile: g.key, TrustedCAFile: g.cacert}
		if !f.Enabled() {
			return
		}
		if err := f.Validate(); err != nil {
			g.tlsErr = fmt.Errorf("--cert, --key: %w", err)
			return
		}
		src, err := tlsconf.NewSource(f)
		if err != nil {
			g.tlsErr = fmt.Errorf("--cacert, --cert, --key: %w", err)
			return
		}
		g.tls = src.ClientConfig("")
	})
	return g.tls, g.tlsErr
}

// openClient connects a client to the cluster of --endpoints.
func (g *globals) openClient(ctx context.Context, edit func(*client.Config)) (*client.Client, error) {
	cfg, err := g.clientConfig()
	if err != nil {
		return nil, err
	}
	if edit != nil {
		edit(&cfg)
	}
	if err := refused(cfg.Endpoints, g.dialTimeout); err != nil {
		return nil, err
	}
	c, err := client.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster at %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	return c, nil
}

// openTable opens the region table in etcd at --endpoints, under
// --etcd-prefix, and waits for the connection: within --dial-timeout (and
// --command-timeout), with an error naming each endpoint and what it met.
func (g *globals) openTable() (*regiontable.Etcd, error) {
	eps, err := g.etcdEndpoints()
	if err != nil {
		return nil, err
	}
	tc, err := g.serverTLS()
	if err != nil {
		return nil, err
	}
	if err := refused(eps, g.dialTimeout); err != nil {
		return nil, err
	}
	store, err := regiontable.OpenEtcd(eps, regiontable.EtcdOptions{Prefix: g.etcdPrefix, Logger: quietLogger, DialTimeout: g.dialTimeout,
		TLS: etcdTLS(eps, tc)})
	if err != nil {
		return nil, err
	}
	ctx, cancel := g.commandContext()
	defer cancel()
	if err := store.Connect(ctx); err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("etcd at %s: %w", strings.Join(eps, ","), err)
	}
	return store, nil
}

// loadTable reads the region table, with a clear error when etcd does not
// answer.
func loadTable(ctx context.Context, store regiontable.Store, eps []string) (regiontable.State, error) {
	st, err := store.Load(ctx)
	if err != nil {
		return st, fmt.Errorf("etcd at %s: %w", strings.Join(eps, ","), err)
	}
	return st, nil
}

// dialServer opens a wire connection to a server.
func (g *globals) dialServer(ctx context.Context, addr string) (*wire.Conn, error) {
	tc, err := g.serverTLS()
	if err != nil {
		return nil, err
	}
	var opts *wire.Options
	if tc != nil {
		opts = &wire.Options{TLS: tc}
	}
	c, err := wire.Dial(ctx, addr, opts)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", addr, err)
	}
	return c, nil
}

// callServer dials the server at addr for one request, decodes its reply
// into rep and closes the connection. The decoded reply aliases nothing:
// it is decoded from a copy of the frame.
func (g *globals) callServer(ctx context.Context, addr string, op wire.Op, req, rep wire.Message) error {
	c, err := g.dialServer(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	f, err := c.CallMessage(ctx, op, req)
	if err != nil {
		return err
	}
	defer f.Release()
	return rep.Decode(bytes.Clone(f.Body))
}

// metadata asks a server to describe itself (with its meganodes).
func metadata(ctx context.Context, c *wire.Conn, meganodes bool) (*wire.MetadataReply, error) {
	f, err := c.CallMessage(ctx, wire.OpMetadata, &wire.MetadataRequest{WantMeganodes: meganodes})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", c.RemoteAddr(), err)
	}
	defer f.Release()
	var rep wire.MetadataReply
	if err := rep.Decode(f.Body); err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", c.RemoteAddr(), err)
	}
	// Decoded keys alias the frame's body: copy them out.
	for i := range rep.Meganodes {
		r := &rep.Meganodes[i].Range
		r.Min = append([]byte(nil), r.Min...)
		r.Max = append([]byte(nil), r.Max...)
	}
	return &rep, nil
}

// byteArg is how key and value arguments are read and printed: plain
// strings, or hexadecimal with --hex.
type byteArg struct{ hex bool }

// parse decodes a command-line argument.
func (b byteArg) parse(what, s string) ([]byte, error) {
	if !b.hex {
		return []byte(s), nil
	}
	v, err := hex.DecodeString(strings.TrimPrefix(strings.ReplaceAll(s, " ", ""), "0x"))
	if err != nil {
		return nil, fmt.Errorf("%s %q is not hexadecimal: %w", what, s, err)
	}
	return v, nil
}

// text formats bytes for JSON and messages: hex with --hex, else the
// string itself.
func (b byteArg) text(v []byte) string {
	if b.hex {
		return hex.EncodeToString(v)
	}
	return string(v)
}

// binary returns the hex form of v for JSON output when text(v) would not
// carry v exactly (not --hex, and v is not valid UTF-8), else "".
func (b byteArg) binary(v []byte) string {
	if b.hex || utf8.Valid(v) {
		return ""
	}
	return hex.EncodeToString(v)
}

// cell formats bytes for a table cell: hex with --hex, the string when it
// is printable, else a quoted Go string.
func (b byteArg) cell(v []byte) string {
	if b.hex {
		return hex.EncodeToString(v)
	}
	if printable(v) {
		return string(v)
	}
	return strconv.Quote(string(v))
}

// quoted formats a key for an error message.
func (b byteArg) quoted(v []byte) string {
	if b.hex {
		return hex.EncodeToString(v)
	}
	return strconv.Quote(string(v))
}

// printable reports whether v is valid UTF-8 without control characters
// or spaces that would break a table's columns, and not empty.
func printable(v []byte) bool {
	if len(v) == 0 || !utf8.Valid(v) {
		return false
	}
	for _, r := range string(v) {
		if r < 0x21 || r == 0x7f || !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// keyError rewrites a client error about key into one clear message.
func (b byteArg) keyError(err error, key []byte) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, client.ErrNotFound):
		return fmt.Errorf("key not found: %s", b.quoted(key))
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w (raise --command-timeout?)", err)
	}
	return err
}

// parsePtr parses a pointer as cellctl prints it (blink.Ptr.String:
// "region:0xoffset"), or as a number (decimal, or hex with 0x).
func parsePtr(s string) (blink.Ptr, error) {
	t := strings.TrimSpace(s)
	if r, off, ok := strings.Cut(t, ":"); ok {
		region, err := strconv.ParseUint(r, 10, 32)
		if err != nil || region == 0 || region > blink.MaxRegionID {
			return 0, fmt.Errorf("pointer %q: region %q is not in 1..%d", s, r, blink.MaxRegionID)
		}
		o, err := strconv.ParseUint(off, 0, 64)
		if err != nil || o > blink.MaxOffset {
			return 0, fmt.Errorf("pointer %q: offset %q is not a number below 2^40", s, off)
		}
		return blink.MakePtr(uint32(region), o), nil
	}
	v, err := strconv.ParseUint(t, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("pointer %q: want region:offset (as in 3:0x400) or a number", s)
	}
	if v == 0 {
		return 0, fmt.Errorf("pointer %q is nil", s)
	}
	return blink.Ptr(v), nil
}
