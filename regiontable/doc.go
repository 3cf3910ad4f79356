// Package regiontable is Cell's cluster state in etcd (docs/design.md §8): which
// servers are alive, which regions exist and who hosts them, the root
// meganode pointer, the region ID counter, and the coordinator election.
// Servers write it; clients and servers read it and follow it with
// watches.
//
// # Key schema
//
// Every key lives under a prefix (EtcdOptions.Prefix, default "/cell"):
//
//	<prefix>/members/<serverID>     JSON Member, bound to the member's lease
//	<prefix>/draining/<serverID>    "1": the server is marked draining
//	<prefix>/missing/<serverID>     how long the server, a member no
//	                                more, has been missing, as the
//	                                coordinator counted it (ns, decimal)
//	<prefix>/regions/<%08d id>      JSON Region
//	<prefix>/root                   the root meganode pointer (blink.Ptr),
//	                                written as "0x%016x"; decimal is read too
//	<prefix>/ids/region             the last region ID handed out (decimal)
//	<prefix>/coordinator/<lease>    a campaigner's server ID, bound to its
//	                                session's lease (hex lease ID)
//
// Server IDs are 1..128 bytes of [A-Za-z0-9._-]. Region IDs are
// 1..blink.MaxRegionID: 0 is never allocated, so that a pointer into a
// region is never confused with nil. JSON field names are part of the
// format (other processes and tools read them); unknown fields are ignored
// on read, so later versions may add some.
//
// # Contract
//
// A Store is safe for concurrent use. Every method takes a context that
// bounds it; a failure of etcd surfaces as that error (wrapped), never as
// a silent empty answer.
//
//   - Members: RegisterMember publishes a member under a lease of
//     EtcdOptions.LeaseTTL (default 5 s) kept alive by the returned
//     Registration until Close, which revokes it (the key goes at once).
//     If the process dies the lease expires and the member disappears
//     within the TTL: a key under members/ means "alive within the last
//     TTL". A member ID that is already registered is refused with
//     ErrMemberExists (a crashed predecessor's key lingers until its lease
//     expires; the caller waits it out). When the lease is lost anyway
//     (etcd unreachable for longer than the TTL), Registration.Done is
//     closed and Err says why; the member must register again.
//   - Marks: SetDraining marks a server draining or not, member or not.
//     MarkMissing records how long a server that is not a member has
//     been missing (none is written for a member: one compare in etcd);
//     RegisterMember deletes the member's mark in the same transaction
//     as it writes the entry, so a live member never has one.
//     ClearMissing deletes a mark. Load lists the
//     marks and Watch delivers their changes (DrainSet, MissingSet).
//   - Regions: PutRegion stores a region's entry unless the stored one
//     supersedes it (Region.Supersedes; ErrStaleEpoch): the leader of a
//     region's raft group publishes itself with its term, a higher term
//     always wins, and an equal term only for the same host (never
//     another leader over an equal term); within it, and for entries
//     without terms, the epoch only grows. Each new incarnation of a
//     region (every start of its host, every leader change) takes the
//     next epoch. Region and Regions read entries; a missing one is
//     ErrNotFound.
//   - Root: Root returns the root meganode pointer, 0 when the cluster has
//     none yet. SetRoot(old, new) is a compare-and-set: it succeeds only if
//     the stored pointer is old (0 = absent) and otherwise returns the
//     current pointer with ErrConflict.
//   - IDs: AllocRegionID hands out each region ID once, cluster-wide
//     (compare-and-set on the counter), ErrExhausted after
//     blink.MaxRegionID.
//   - Watch: Load returns a consistent snapshot with its Revision; Watch
//     delivers every change made after a revision, in order, so a cache
//     built from Load and then Watch(rev) misses nothing. A watch that
//     cannot go on (the revision was compacted away, the store closed)
//     delivers one Event with Err set and closes its channel: reload and
//     watch again.
//   - Coordinator election: Campaign(id) joins the election and blocks
//     until id is elected (or its context ends: the campaign is
//     withdrawn and Campaign returns the context's error). Campaigners
//     are elected one at a time, in the order they joined; Coordinator
//     names the one whose turn it is (ErrNotFound when nobody
//     campaigns). With etcd, every campaign is a concurrency.Election
//     campaign under its own concurrency.Session, a lease of LeaseTTL;
//     the session keeps the campaign alive while it waits and the
//     Leadership alive once it won. Leadership.Resign revokes the lease
//     and the next campaigner is elected at once. When the lease is lost
//     (etcd unreachable for longer than the TTL, the process died) the
//     key goes and the next campaigner is elected within the TTL; the
//     Leadership's Done is closed and Err wraps ErrLeaseLost, and a
//     campaign still waiting fails with ErrLeaseLost: campaign again.
//     The election is advisory, like every lease: a coordinator cut off
//     from etcd learns that it lost the lease when its keepalive
//     deadline passes, which may be a little after etcd elected the next
//     one. What a coordinator changes in the table must therefore be
//     safe against a deposed one (compare-and-set, epochs), and a
//     coordinator acts only while Done is open. Election keys live
//     outside members/ and regions/, so Load and Watch ignore them.
//
// Staleness (docs/design.md §8, §9): what a reader got from the table may be out of
// date by the time it uses it. A server never trusts a client's view: a
// request for a region it does not host is redirected (wire.StatusWrongServer)
// and one with an old epoch is refused (wire.StatusStaleEpoch), after which
// the client reloads. One-sided readers must additionally bound how long they
// trust a cached entry (later issues add read leases).
//
// Two implementations share one contract test suite: Etcd (production, over
// go.etcd.io/etcd/client/v3) and Memory (unit tests of other packages; its
// leases never expire unless the test expires them with ExpireMember or
// ExpireCampaign). Package embedded starts an in-process etcd server for
// the single-node default and for tests.
//
// Access: every key of the table lies under its prefix (default "/cell/").
// EnableRoles sets up etcd's role-based access control for Cell's
// identities on that range (roles cell-server and cell-admin read and
// write it, cell-client reads it; users named by certificate CommonNames)
// and turns etcd's auth on (docs/tls.md, "etcd roles").
package regiontable
