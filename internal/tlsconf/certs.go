package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Role is what a peer's certificate allows it to do.
type Role uint8

const (
	// RoleNone is a peer without a verified certificate (plain TCP, or TLS
	// without client certificates).
	RoleNone Role = iota
	// RoleClient reads and writes.
	RoleClient
	// RoleAdmin also runs admin operations.
	RoleAdmin
	// RoleServer is a cluster server: server-to-server and admin
	// operations.
	RoleServer
)

// The Organizational Units that mark a role.
const (
	OUServer = "cell-server"
	OUAdmin  = "cell-admin"
	OUClient = "cell-client"
)

var roleNames = [...]string{"none", "client", "admin", "server"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// ou is the Organizational Unit that marks r ("" for RoleNone).
func (r Role) ou() string {
	switch r {
	case RoleServer:
		return OUServer
	case RoleAdmin:
		return OUAdmin
	case RoleClient:
		return OUClient
	}
	return ""
}

// RoleOf is the role cert grants: the highest its OUs name, RoleClient
// when they name none. A nil cert has RoleNone.
func RoleOf(cert *x509.Certificate) Role {
	if cert == nil {
		return RoleNone
	}
	r := RoleClient
	for _, ou := range cert.Subject.OrganizationalUnit {
		switch {
		case ou == OUServer:
			r = max(r, RoleServer)
		case ou == OUAdmin:
			r = max(r, RoleAdmin)
		}
	}
	return r
}

// PeerRole is the role of the peer of a TLS connection: the role of its
// verified leaf certificate, RoleNone when it sent none or the chain was
// not verified.
func PeerRole(cs *tls.ConnectionState) Role {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return RoleNone
	}
	return RoleOf(cs.VerifiedChains[0][0])
}

// CA is a certificate authority for development and tests: it issues
// server, admin and client certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM is Cert PEM-encoded.
	CertPEM []byte
}

// NewCA returns a fresh self-signed CA valid from an hour ago for validFor.
func NewCA(commonName string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"Cell"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// LoadCA reads a CA's certificate and key from PEM files.
func LoadCA(certFile, keyFile string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: load CA: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("tlsconf: load CA %s: key is %T, want ECDSA", keyFile, pair.PrivateKey)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("tlsconf: load CA: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("tlsconf: load CA: %s is not a CA certificate", certFile)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", pair.Certificate[0])}, nil
}

// KeyPEM is the CA's private key, PEM-encoded.
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.Key) }

// Issue describes a certificate for CA.Issue.
type Issue struct {
	CommonName string
	Role       Role
	// Hosts are the DNS names and IP addresses the certificate is valid
	// for as a TLS server (servers; ignored for other roles).
	Hosts []string
	// NotBefore and NotAfter bound validity; zero: from an hour ago for
	// a year.
	NotBefore, NotAfter time.Time
}

// Issue returns a new certificate and its key, PEM-encoded. A server's
// certificate is valid for both ends of a connection (servers dial each
// other with it); others are client certificates.
func (ca *CA) Issue(is Issue) (certPEM, keyPEMBytes []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconf: key: %w", err)
	}
	now := time.Now()
	nb, na := is.NotBefore, is.NotAfter
	if nb.IsZero() {
		nb = now.Add(-time.Hour)
	}
	if na.IsZero() {
		na = now.Add(365 * 24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: is.CommonName, Organization: []string{"Cell"}},
		NotBefore:    nb,
		NotAfter:     na,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if ou := is.Role.ou(); ou != "" {
		tmpl.Subject.OrganizationalUnit = []string{ou}
	}
	if is.Role == RoleServer {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		for _, h := range is.Hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconf: issue %q: %w", is.CommonName, err)
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), kp, nil
}

// The files WriteDevCerts writes into its directory.
const (
	CAFile         = "ca.crt"
	CAKeyFile      = "ca.key"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
	AdminCertFile  = "admin.crt"
	AdminKeyFile   = "admin.key"
	ClientCertFile = "client.crt"
	ClientKeyFile  = "client.key"
	// RootCertFile is etcd's root identity (CommonName "root", role
	// cell-admin for Cell's servers): what changes etcd's users and roles
	// once its auth is on (cellctl etcd-roles).
	RootCertFile = "root.crt"
	RootKeyFile  = "root.key"
)

// DefaultHosts are the names a development server certificate is valid
// for when no hosts are given.
var DefaultHosts = []string{"localhost", "127.0.0.1", "::1"}

// WriteDevCerts creates dir (0700) and writes into it a new CA, a server
// certificate valid for hosts (DefaultHosts if none; every server of a
// development cluster shares it), an admin and a client certificate, and
// root.crt (CommonName "root", role cell-admin: etcd's root user once
// regiontable.EnableRoles turned etcd's auth on), each valid for validFor.
// Each certificate's CommonName is its etcd user name: "cell-server",
// "cell-admin", "cell-client", "root". Keys are written 0600. It refuses to overwrite a CA
// already in dir (ErrExist), so that certificates issued earlier stay
// valid; pass an empty dir.
func WriteDevCerts(dir string, hosts []string, validFor time.Duration) error {
	if len(hosts) == 0 {
		hosts = DefaultHosts
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, CAFile)); err == nil {
		return fmt.Errorf("tlsconf: %s already holds a CA: %w", dir, os.ErrExist)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("tlsconf: %w", err)
	}
	ca, err := NewCA("Cell development CA", validFor)
	if err != nil {
		return err
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{{CAFile, ca.CertPEM, 0o644}, {CAKeyFile, caKey, 0o600}}
	now := time.Now()
	for _, c := range []struct {
		role      Role
		cn        string
		cert, key string
	}{
		{RoleServer, "cell-server", ServerCertFile, ServerKeyFile},
		{RoleAdmin, "cell-admin", AdminCertFile, AdminKeyFile},
		{RoleClient, "cell-client", ClientCertFile, ClientKeyFile},
		{RoleAdmin, "root", RootCertFile, RootKeyFile},
	} {
		cp, kp, err := ca.Issue(Issue{CommonName: c.cn, Role: c.role, Hosts: slices.Clone(hosts),
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validFor)})
		if err != nil {
			return err
		}
		files = append(files, struct {
			name string
			data []byte
			mode os.FileMode
		}{c.cert, cp, 0o644}, struct {
			name string
			data []byte
			mode os.FileMode
		}{c.key, kp, 0o600})
	}
	for _, f := range files {
		if err := WriteFileAtomic(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// WriteFileAtomic writes data to path through a temporary file renamed
// over it, so that a reader (a server reloading its certificate) never
// sees half a file.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("tlsconf: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("tlsconf: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("tlsconf: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)) // never fails
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: key: %w", err)
	}
	return pemBlock("EC PRIVATE KEY", der), nil
}
