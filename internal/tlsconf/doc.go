// Package tlsconf holds what every TLS endpoint of Cell shares: the roles a
// certificate grants (server, admin, client), development certificates
// (a CA and the certificates it issues, written by `cellctl certs`), and
// tls.Configs built from certificate files that are read again when the
// files change.
//
// # Roles
//
// A certificate's role is named by an Organizational Unit of its subject:
//
//	OU=cell-server  a cluster server: may run server-to-server operations
//	                (split ops, raft) and admin operations
//	OU=cell-admin   an operator: admin operations (check, dumps, membership)
//	OU=cell-client  an application: reads and writes
//
// A certificate with none of them is a client. The CA that signed it is
// what makes the OU trustworthy: a deployment gives its server certificates
// from a CA (or an intermediate) that does not sign anything else it cannot
// vouch for.
package tlsconf
