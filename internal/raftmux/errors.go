package raftmux

import "errors"

// Errors returned by the package. Test with errors.Is; they are wrapped with
// context (region, address) unless said otherwise.
var (
	// ErrClosed: the Mux or the Group was closed. Accept of a closed Group
	// returns an error that wraps both ErrClosed and net.ErrClosed, so that
	// code written for net.Listener recognises it.
	ErrClosed = errors.New("raftmux: closed")

	// ErrRegionTaken: Mux.Group was called for a region that already has an
	// open Group on this Mux. Close that Group first.
	ErrRegionTaken = errors.New("raftmux: region already has a group on this mux")

	// ErrUnknownRegion: the peer mux answered a Dial's handshake with "no
	// group for this region here" (it does not host the region, or not
	// yet, or not any more).
	ErrUnknownRegion = errors.New("raftmux: peer hosts no group for the region")

	// ErrVersion: the peer mux speaks another version of the handshake.
	ErrVersion = errors.New("raftmux: peer speaks another handshake version")

	// ErrBusy: the peer mux refused the connection because the region's
	// accept backlog was full (its raft transport is not accepting). Raft
	// retries later, as after any failed dial.
	ErrBusy = errors.New("raftmux: peer's accept backlog for the region is full")

	// ErrHandshake: a Dial's handshake failed in any other way: the peer
	// closed the connection (it is not a raftmux, it is overloaded, or it
	// rejected the header), answered garbage, or the timeout ran out.
	ErrHandshake = errors.New("raftmux: handshake failed")

	// ErrNotServer: with TLS, the peer's certificate does not have the
	// server role (tlsconf.RoleServer): the acceptor said so of this mux's
	// certificate, or this mux found it in the acceptor's.
	ErrNotServer = errors.New("raftmux: peer certificate is not a cell server's")

	// ErrNotAdvertisable: Listen's address (or Options.AdvertiseAddr) has
	// an unspecified IP (0.0.0.0, ::) that peers cannot dial; set
	// Options.AdvertiseAddr.
	ErrNotAdvertisable = errors.New("raftmux: address is not advertisable")

	// ErrPartitioned is returned by a FaultNet for traffic it refuses
	// because of a partition (Partition, Isolate) or its filter.
	ErrPartitioned = errors.New("raftmux: injected fault: partitioned")

	// ErrDropped is returned by a FaultNet for a Read or Write it dropped
	// (SetDropRate); the connection is closed with it.
	ErrDropped = errors.New("raftmux: injected fault: dropped")
)
