package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/cellstore/cell/rdma"
	"github.com/cellstore/cell/wire"
)

// TestClassify checks how every kind of error maps for reads and writes:
// final errors match both the client's and the wire's sentinel, retries
// carry their cause, and a write that may have been sent is never
// retried.
func TestClassify(t *testing.T) {
	detail := func(st wire.Status) error { return &wire.StatusError{Status: st, Message: "detail"} }
	tests := []struct {
		name  string
		err   error
		write bool
		d     disposition
		cause retryCause
		is    []error // the final error matches all of these
	}{
		{"not found", wire.ErrNotFound, false, final, 0, []error{ErrNotFound, wire.ErrNotFound}},
		{"not found detail", detail(wire.StatusNotFound), true, final, 0, []error{ErrNotFound, wire.ErrNotFound}},
		{"key too large", detail(wire.StatusKeyTooLarge), true, final, 0, []error{ErrKeyTooLarge, wire.ErrKeyTooLarge}},
		{"value too large", wire.ErrValueTooLarge, true, final, 0, []error{ErrValueTooLarge, wire.ErrValueTooLarge}},
		{"empty key", wire.ErrEmptyKey, false, final, 0, []error{ErrEmptyKey, wire.ErrEmptyKey}},
		{"outcome unknown", wire.ErrOutcomeUnknown, true, final, 0, []error{ErrOutcomeUnknown, wire.ErrOutcomeUnknown}},
		{"internal read", wire.ErrInternal, false, final, 0, []error{ErrServer, wire.ErrInternal}},
		{"internal write", detail(wire.StatusInternal), true, final, 0, []error{ErrOutcomeUnknown, wire.ErrInternal}},
		{"bad request", wire.ErrBadRequest, false, final, 0, []error{ErrServer, wire.ErrBadRequest}},
		{"conn lost unsent write", &wire.ConnError{Err: io.EOF}, true, retryRefresh, causeConnLost, nil},
		{"conn lost sent read", &wire.ConnError{Sent: true, Err: io.EOF}, false, retryRefresh, causeConnLost, nil},
		{"conn lost sent write", &wire.ConnError{Sent: true, Err: io.EOF}, true, final, 0,
			[]error{ErrOutcomeUnknown, wire.ErrConnLost, io.EOF}},
		{"dial", fmt.Errorf("%w x: %w", errDial, io.EOF), true, retryRefresh, causeConnLost, nil},
		// A write whose dial a deadline ended was never sent: retried
		// like any lost connection (giveUp ends it with the caller's
		// context), never ErrOutcomeUnknown.
		{"dial timed out write", fmt.Errorf("%w x: %w", errDial, context.DeadlineExceeded), true, retryRefresh, causeConnLost, nil},
		{"deadline read", context.DeadlineExceeded, false, final, 0, []error{context.DeadlineExceeded}},
		{"deadline write", context.DeadlineExceeded, true, final, 0, []error{ErrOutcomeUnknown, context.DeadlineExceeded}},
		{"needs retry", wire.ErrNeedsRetry, true, retrySame, causeServerBusy, nil},
		{"overloaded", detail(wire.StatusOverloaded), false, retrySame, causeServerBusy, nil},
		{"unavailable", wire.ErrUnavailable, true, retrySame, causeServerBusy, nil},
		{"expired", wire.ErrExpired, true, retrySame, causeServerBusy, nil},
		{"wrong server", detail(wire.StatusWrongServer), true, retryRefresh, causeRedirect, nil},
		{"stale epoch", wire.ErrStaleEpoch, false, retryRefresh, causeRedirect, nil},
		{"unknown region", wire.ErrUnknownRegion, false, retryRefresh, causeRedirect, nil},
		{"no route", errNoRoute, true, retryRefresh, causeRedirect, nil},
		{"key out of range", wire.ErrKeyOutOfRange, true, retryRestart, causeRestart, nil},
		{"out of bounds", wire.ErrOutOfBounds, false, retryRestart, causeRestart, nil},
		// A certificate's role too low, or plain TCP to a TLS port (a
		// refusal frame: not sent): final, never an unknown outcome.
		{"permission denied", detail(wire.StatusPermissionDenied), true, final, 0, []error{ErrPermissionDenied, wire.ErrPermissionDenied}},
		{"refused plain tcp write", &wire.ConnError{Err: fmt.Errorf("%w: %w", wire.ErrRefused, detail(wire.StatusPermissionDenied))}, true, final, 0,
			[]error{ErrPermissionDenied, wire.ErrRefused}},
		{"handshake", fmt.Errorf("%w x: %w", errDial, wire.ErrHandshake), true, retryRefresh, causeConnLost, nil},
	}
	for _, tt := range tests {
		d, cause, err := classify(tt.err, tt.write)
		if d != tt.d || (d != final && cause != tt.cause) {
			t.Errorf("%s: classify = %v, %v; want %v, %v", tt.name, d, cause, tt.d, tt.cause)
			continue
		}
		for _, want := range tt.is {
			if !errors.Is(err, want) {
				t.Errorf("%s: %v does not match %v", tt.name, err, want)
			}
		}
	}
	if _, _, err := classify(fmt.Errorf("%w x: %w", errDial, context.DeadlineExceeded), true); isOutcomeUnknown(err) {
		t.Errorf("a write whose dial timed out is reported %v, but it was never sent", err)
	}
	if got := errNotFound.Error(); got != "cell: key not found" {
		t.Errorf("bare not found reads %q", got)
	}
	_, _, err := classify(detail(wire.StatusNotFound), false)
	if got := err.Error(); got != "cell: key not found: wire: key not found: detail" {
		t.Errorf("detailed not found reads %q", got)
	}
	if readCause(fmt.Errorf("x: %w", rdma.ErrDisconnected)) != causeConnLost || readCause(rdma.ErrRevoked) != causeReadFailed {
		t.Error("readCause")
	}
}

// TestLimits: keys and values are validated client-side against the
// store's limits (node size / 8 for keys, 1 MiB values), before anything
// is sent; values up to the limit round-trip.
func TestLimits(t *testing.T) {
	rc := startReal(t, 1, nil)
	c := mustClient(t, realConfig(t, rc))
	ctx := testCtx(t, 10*time.Second)
	// The server counts a request after answering it: wait until the
	// count settles before comparing.
	served := func() float64 {
		v := counterSum(t, rc.regs[0], "cell_server_ops_total")
		for {
			time.Sleep(20 * time.Millisecond)
			w := counterSum(t, rc.regs[0], "cell_server_ops_total")
			if w == v {
				return v
			}
			v = w
		}
	}
	before := served()
	maxKey := 512 / 8
	long := bytes.Repeat([]byte("k"), maxKey+1)
	for _, tt := range []struct {
		name string
		err  error
		want error
	}{
		{"put empty", c.Put(ctx, nil, []byte("v")), ErrEmptyKey},
		{"get empty", func() error { _, err := c.Get(ctx, []byte{}); return err }(), ErrEmptyKey},
		{"contains empty", func() error { _, err := c.Contains(ctx, nil); return err }(), ErrEmptyKey},
		{"delete empty", c.Delete(ctx, nil), ErrEmptyKey},
		{"put long key", c.Put(ctx, long, []byte("v")), ErrKeyTooLarge},
		{"get long key", func() error { _, err := c.Get(ctx, long); return err }(), ErrKeyTooLarge},
		{"put large value", c.Put(ctx, []byte("k"), make([]byte, wire.MaxValueSize+1)), ErrValueTooLarge},
	} {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	if n := served(); n != before {
		t.Errorf("invalid requests reached the server (%v requests)", n-before)
	}
	// The largest key and value round-trip, client-side and server-side.
	big := bytes.Repeat([]byte("0123456789abcdef"), wire.MaxValueSize/16)
	k := bytes.Repeat([]byte("K"), maxKey)
	if err := c.Put(ctx, k, big); err != nil {
		t.Fatalf("put 1 MiB value: %v", err)
	}
	if served() == before {
		t.Fatal("the server's request counter does not count")
	}
	for _, mode := range []string{"server", "client"} {
		cfg := realConfig(t, rc)
		cfg.Mode.UnmarshalText([]byte(mode))
		c2 := mustClient(t, cfg)
		got, err := c2.Get(ctx, k)
		if err != nil || !bytes.Equal(got, big) {
			t.Fatalf("%s: get 1 MiB value: %d bytes, %v", mode, len(got), err)
		}
	}
	if err := c.Put(ctx, []byte("empty"), nil); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, []byte("empty")); err != nil || v == nil || len(v) != 0 {
		t.Fatalf("empty value: %q (nil %v), %v", v, v == nil, err)
	}
}

// TestConfigValidate rejects bad configs with ErrInvalidConfig.
func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"nothing", Config{}},
		{"both", Config{Servers: []string{"a:1"}, Endpoints: []string{"b:2"}}},
		{"empty server", Config{Servers: []string{""}}},
		{"provider", Config{Servers: []string{"a:1"}, Provider: "ib"}},
		{"conns", Config{Servers: []string{"a:1"}, ConnsPerServer: 100}},
		{"min level", Config{Servers: []string{"a:1"}, NodeCacheMinLevel: -1}},
		{"backoff", Config{Servers: []string{"a:1"}, RetryBackoff: time.Second, MaxRetryBackoff: time.Millisecond}},
	} {
		cfg := tt.cfg
		cfg.EnsureDefaults()
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v, want ErrInvalidConfig", tt.name, err)
		}
		if _, err := New(context.Background(), tt.cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", tt.name, err)
		}
	}
	var cfg Config
	cfg.Servers = []string{"a:1"}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if cfg.NodeCacheBytes != 128<<20 || cfg.NodeCacheMinLevel != 4 || cfg.PathCacheEntries != 4096 ||
		cfg.ConnsPerServer != 2 || cfg.Provider != ProviderAuto {
		t.Errorf("defaults: %+v", cfg)
	}
	// Nobody listening: New fails with ErrUnavailable within its context.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := New(ctx, Config{Servers: []string{"127.0.0.1:1"}, Logger: testLogger(t)}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("New with no server: %v, want ErrUnavailable", err)
	}
}
