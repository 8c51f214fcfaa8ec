package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// Certs are PEM files made for one test, in its temporary directory: a CA,
// a server certificate it signed for 127.0.0.1, ::1 and localhost, a client
// certificate it signed, and a second CA that signed nothing the servers
// use (an untrusted one, for the "wrong CA" cases). Nothing is committed:
// each test makes its own.
type Certs struct {
	Dir                       string
	CAFile                    string
	ServerCertFile, ServerKey string
	ClientCertFile, ClientKey string
	OtherCAFile               string // trusts none of the above
	ca                        *x509.Certificate
	caKey                     *ecdsa.PrivateKey
}

// NewCerts makes the files; it fails the test on error.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	c := &Certs{Dir: t.TempDir()}
	var err error
	if c.ca, c.caKey, err = writeCA(filepath.Join(c.Dir, "ca.pem"), "sluice test CA"); err != nil {
		t.Fatalf("testenv: certs: %v", err)
	}
	c.CAFile = filepath.Join(c.Dir, "ca.pem")
	c.ServerCertFile, c.ServerKey = filepath.Join(c.Dir, "server.pem"), filepath.Join(c.Dir, "server-key.pem")
	if err := c.Sign(c.ServerCertFile, c.ServerKey, "localhost"); err != nil {
		t.Fatalf("testenv: certs: %v", err)
	}
	c.ClientCertFile, c.ClientKey = filepath.Join(c.Dir, "client.pem"), filepath.Join(c.Dir, "client-key.pem")
	if err := c.Sign(c.ClientCertFile, c.ClientKey, "sluice-test-client"); err != nil {
		t.Fatalf("testenv: certs: %v", err)
	}
	c.OtherCAFile = filepath.Join(c.Dir, "other-ca.pem")
	if _, _, err := writeCA(c.OtherCAFile, "an untrusted CA"); err != nil {
		t.Fatalf("testenv: certs: %v", err)
	}
	return c
}

// Client is the TLS a client of the test's servers uses: trusting the CA,
// with the client certificate.
func (c *Certs) Client() tlsfiles.Client {
	return tlsfiles.Client{CAFile: c.CAFile, CertFile: c.ClientCertFile, KeyFile: c.ClientKey}
}

// Server is the TLS the test's servers use, asking clients for a
// certificate when mutual is true.
func (c *Certs) Server(mutual bool) tlsfiles.Server {
	s := tlsfiles.Server{CertFile: c.ServerCertFile, KeyFile: c.ServerKey}
	if mutual {
		s.ClientCAFile = c.CAFile
	}
	return s
}

// Sign writes a new certificate for name (also valid for 127.0.0.1 and ::1)
// signed by the CA, with its key, replacing the files if they exist.
func (c *Certs) Sign(certFile, keyFile, name string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name, "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, &key.PublicKey, c.caKey)
	if err != nil {
		return err
	}
	return writeKeyPair(certFile, keyFile, der, key)
}

func writeCA(file, name string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

func writeKeyPair(certFile, keyFile string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}
