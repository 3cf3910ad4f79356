// Package raftmux lets all the raft groups of a Cell server share one TCP
// listener (docs/design.md §9, flag --raft-listen): a Mux accepts every raft
// connection of the server and hands each to the raft.StreamLayer of the
// region named in the connection's first bytes.
//
//	mux, _ := raftmux.Listen(":7100", raftmux.Options{AdvertiseAddr: "10.0.0.1:7100"})
//	layer, _ := mux.Group(region)            // one per hosted region
//	trans := raft.NewNetworkTransport(layer, 3, 10*time.Second, logOutput)
//	r, _ := raft.NewRaft(conf, fsm, logs, stable, snaps, trans)
//	// raft.ServerAddress of this replica: mux.Addr().String()
//
// # Handshake
//
// The dialer of every new connection writes a 16-byte header naming its
// region, and the acceptor answers with a 4-byte reply; then the connection
// is raft's (format.go pins both):
//
//	header, dialer -> acceptor
//	0           4       5                   8                  12                 16
//	+-----------+-------+-------------------+------------------+------------------+
//	| "CRFT"    | ver 1 | reserved (0 0 0)  | region u32 LE    | crc32c u32 LE    |
//	+-----------+-------+-------------------+------------------+------------------+
//	                                               crc32c (Castagnoli) of bytes [0,12)
//	reply, acceptor -> dialer
//	0           2       3       4
//	+-----------+-------+-------+
//	| "CR"      | ver 1 |status |   0 ok, 1 bad version, 2 unknown region,
//	+-----------+-------+-------+   3 bad header, 4 busy, 5 not a server (TLS)
//
// A region's Dial returns once the peer said ok, so a peer that does not
// host the region (not yet, or not any more) fails the dial with
// ErrUnknownRegion rather than the first RPC. A header with the wrong magic
// (not a raftmux at all) is closed without a reply.
//
// # Hostile and slow peers
//
// The accept loop never reads: each connection's handshake runs in its own
// goroutine under a deadline (Options.HandshakeTimeout), so a peer that
// sends half a header holds up nobody else's accepts. At most
// Options.MaxPendingHandshakes handshakes run at once; a connection beyond
// that is closed unread. Handshaken connections wait for their group's
// Accept in a bounded backlog (Options.AcceptBacklog); when it is full the
// dialer gets ErrBusy. Every rejection is counted by reason in Stats
// (Reject) and logged at Debug (a peer of another handshake version at
// Warn: that is a mixed-version cluster, not noise).
//
// # TLS and peer identity
//
// With Options.ServerTLS and Options.ClientTLS the mux speaks TLS: the TLS
// handshake comes first, then the raftmux header and reply and raft's own
// stream, all inside TLS. The acceptor's TLS handshake runs in the same
// per-connection goroutine and under the same HandshakeTimeout as the
// header (slow TLS peers block no accepts either); the dialer's within the
// Dial's timeout. Both ends require the other's certificate to carry the
// server role (tlsconf.RoleServer, OU cell-server): the acceptor checks
// the verified chain of the dialer's certificate (ServerTLS must verify
// client certificates) and answers statusNotServer (5) to any other role,
// counted as RejectNotServer, which the dialer returns as ErrNotServer;
// the dialer checks the acceptor's leaf itself and fails with ErrNotServer
// too. A failed TLS handshake (a plain peer, an untrusted, expired or
// missing certificate) is RejectTLS on the acceptor and ErrHandshake on
// the dialer.
//
// # Lifetimes
//
// A Group is a net.Listener for one region. Closing it (raft's
// NetworkTransport.Close does) unregisters the region, so later
// connections for it are refused and Mux.Group may open it again, and
// closes all of the group's connections, accepted and dialed. Mux.Close
// closes the listener, every group and every pending handshake, and waits
// for the mux's goroutines.
//
// # Wiring a server
//
// One Mux per server, on the --raft-listen address; its advertised address
// is the raft ServerAddress of every replica on the server, so a server
// publishes it once (next to its RPC address) and a region's raft
// configuration names each voter by that address. A transport per region:
//
//	raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
//		Stream:  layer,            // mux.Group(region)
//		MaxPool: 3,
//		Timeout: 10 * time.Second, // also bounds each Dial's handshake
//		Logger:  hclogger,
//		// Optional: resolve a voter's address from its ServerID at dial
//		// time (the member table), so that a server that moved is found:
//		ServerAddressProvider: provider,
//	})
//
// Each region's transport keeps its own connections, so a server holds
// about regions × peers × (MaxPool + 1 pipeline) connections in each
// direction; fine for hundreds of regions per server, and the place to
// change (one shared connection per peer pair, streams inside) if that
// grows by orders of magnitude. Close the transport after raft.Shutdown:
// it closes the Group, which refuses the region's later connections and
// closes its open ones.
//
// # Faults
//
// Options.Faults injects faults for tests. A Mux consults it only for the
// connections it dials (Faults.Dial before dialing, Faults.Conn to wrap the
// connection after its handshake); since both directions of a connection
// pass through its dialer's wrapper, a Faults shared by every mux of a test
// governs all their traffic. FaultNet is the ready-made one: Partition,
// Isolate, Heal, a per-link filter, delay, and drops that tear a message
// and close its connection. Rules apply to established connections too:
// isolating a node closes its connections and fails every later Read and
// Write across the cut, not only new dials. Nodes are named by their
// advertised address, the raft ServerAddress.
package raftmux
