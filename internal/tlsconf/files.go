package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// ErrNoCertificates is returned when a trusted CA file holds no
// certificate.
var ErrNoCertificates = errors.New("tlsconf: no certificate in file")

// Files names the PEM files of one TLS endpoint, in etcd's terms.
type Files struct {
	// CertFile and KeyFile are this end's certificate (with any
	// intermediates) and key.
	CertFile, KeyFile string
	// TrustedCAFile holds the CAs that verify the other end: servers'
	// certificates for a client, clients' certificates for a server. ""
	// means the system's roots for a client, and no client certificates
	// verified for a server.
	TrustedCAFile string
	// ClientCertAuth makes a server require a client certificate signed by
	// TrustedCAFile's CAs.
	ClientCertAuth bool
}

// Enabled reports whether the files configure TLS at all.
func (f Files) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.TrustedCAFile != "" }

// Validate checks that the files make sense together (not that they exist).
func (f Files) Validate() error {
	switch {
	case (f.CertFile == "") != (f.KeyFile == ""):
		return errors.New("tlsconf: a certificate file needs its key file, and a key file its certificate")
	case f.ClientCertAuth && f.TrustedCAFile == "":
		return errors.New("tlsconf: client certificate authentication needs a trusted CA file")
	}
	return nil
}

// Source reads an endpoint's Files and reads them again when they change:
// each new handshake stats the files (at most once a second) and reloads
// those whose modification time, size or inode changed. A reload that
// fails (a half-written file) keeps what was loaded before and is
// reported by Err; connections made before a reload keep their
// certificates. Safe for concurrent use.
type Source struct {
	files Files
	now   func() time.Time

	mu struct {
		sync.Mutex
		cert    *tls.Certificate
		pool    *x509.CertPool
		stamps  [3]stamp // CertFile, KeyFile, TrustedCAFile
		checked time.Time
		err     error // the last reload's error
		reloads int
	}
}

// stamp identifies one version of a file.
type stamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func stampOf(path string) (stamp, error) {
	if path == "" {
		return stamp{}, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stamp{mod: fi.ModTime(), size: fi.Size(), ino: inode(fi)}, nil
}

// NewSource loads f's files; it fails if they cannot be loaded now.
func NewSource(f Files) (*Source, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	s := &Source{files: f, now: time.Now}
	stamps, cert, pool, err := s.read()
	if err != nil {
		return nil, err
	}
	s.mu.stamps, s.mu.cert, s.mu.pool, s.mu.checked = stamps, cert, pool, s.now()
	return s, nil
}

// Files returns the files s reads.
func (s *Source) Files() Files { return s.files }

// read loads the files as they are now.
func (s *Source) read() ([3]stamp, *tls.Certificate, *x509.CertPool, error) {
	var st [3]stamp
	for i, p := range []string{s.files.CertFile, s.files.KeyFile, s.files.TrustedCAFile} {
		v, err := stampOf(p)
		if err != nil {
			return st, nil, nil, fmt.Errorf("tlsconf: %w", err)
		}
		st[i] = v
	}
	var cert *tls.Certificate
	if s.files.CertFile != "" {
		c, err := tls.LoadX509KeyPair(s.files.CertFile, s.files.KeyFile)
		if err != nil {
			return st, nil, nil, fmt.Errorf("tlsconf: load %s: %w", s.files.CertFile, err)
		}
		cert = &c
	}
	var pool *x509.CertPool
	if s.files.TrustedCAFile != "" {
		b, err := os.ReadFile(s.files.TrustedCAFile)
		if err != nil {
			return st, nil, nil, fmt.Errorf("tlsconf: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return st, nil, nil, fmt.Errorf("%w: %s", ErrNoCertificates, s.files.TrustedCAFile)
		}
	}
	return st, cert, pool, nil
}

// current returns the certificate and pool, reloading them first if the
// files changed since they were last checked (at most once a second).
func (s *Source) current() (*tls.Certificate, *x509.CertPool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Sub(s.mu.checked) < time.Second {
		return s.mu.cert, s.mu.pool
	}
	s.mu.checked = now
	changed := false
	for i, p := range []string{s.files.CertFile, s.files.KeyFile, s.files.TrustedCAFile} {
		v, err := stampOf(p)
		if err != nil || v != s.mu.stamps[i] {
			changed = true
			break
		}
	}
	if !changed {
		return s.mu.cert, s.mu.pool
	}
	stamps, cert, pool, err := s.read()
	if err != nil {
		s.mu.err = err
		return s.mu.cert, s.mu.pool
	}
	s.mu.stamps, s.mu.cert, s.mu.pool, s.mu.err = stamps, cert, pool, nil
	s.mu.reloads++
	return cert, pool
}

// Err is the error of the last reload, nil if it succeeded.
func (s *Source) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.err
}

// Reloads counts the reloads that succeeded.
func (s *Source) Reloads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.reloads
}

// ServerConfig is a server's tls.Config: its certificate, and client
// certificates verified against the trusted CAs (required with
// ClientCertAuth, else verified when sent). Both follow the files.
func (s *Source) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := s.current()
			if cert == nil {
				return nil, errors.New("tlsconf: no server certificate configured")
			}
			c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}}
			switch {
			case s.files.ClientCertAuth:
				c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, pool
			case pool != nil:
				c.ClientAuth, c.ClientCAs = tls.VerifyClientCertIfGiven, pool
			}
			return c, nil
		},
	}
}

// ClientConfig is a client's tls.Config for servers named serverName (""
// takes the name from the dialled address): the server's certificate is
// verified against the trusted CAs (the system's when none), and this
// end's certificate, if any, is sent when the server asks. Both follow the
// files.
func (s *Source) ClientConfig(serverName string) *tls.Config {
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := s.current()
			if cert == nil {
				return &tls.Certificate{}, nil // none: the server decides
			}
			return cert, nil
		},
	}
	if s.files.TrustedCAFile == "" {
		return c
	}
	// The roots must follow the file, and tls.Config.RootCAs cannot
	// change: verify by hand with the current pool.
	c.InsecureSkipVerify = true
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		_, pool := s.current()
		return verifyServer(cs, pool)
	}
	return c
}

// verifyServer does what crypto/tls does with RootCAs: the chain the
// server sent, to one of pool's roots, for the name dialled.
func verifyServer(cs tls.ConnectionState, pool *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tlsconf: the server sent no certificate")
	}
	if cs.ServerName == "" {
		return errors.New("tlsconf: no server name to verify the server's certificate for (ForAddr sets it)")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		DNSName:       cs.ServerName,
		Roots:         pool,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("tlsconf: server certificate: %w", err)
	}
	return nil
}

// ForAddr returns c for dialling addr ("host:port"): a clone with
// ServerName set to addr's host when c names none. tls.Client, unlike
// tls.Dial, does not take the name from the address.
//
// An IP address is not sent as SNI, so crypto/tls leaves
// ConnectionState.ServerName empty for it: the clone's VerifyConnection
// (ClientConfig's, which verifies for that name) is given the host.
func ForAddr(c *tls.Config, addr string) *tls.Config {
	if c == nil || c.ServerName != "" {
		return c
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	c = c.Clone()
	c.ServerName = host
	if verify := c.VerifyConnection; verify != nil {
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if cs.ServerName == "" {
				cs.ServerName = host
			}
			return verify(cs)
		}
	}
	return c
}
