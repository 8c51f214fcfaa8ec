package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// serve accepts TLS connections with cfg on loopback until the test ends.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// dial handshakes with addr and returns the serial of the certificate seen.
func dial(addr string, c tlsfiles.Client) (string, error) {
	cfg, err := c.Config()
	if err != nil {
		return "", err
	}
	conn, err := tls.DialWithDialer(&net.Dialer{}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	// With TLS 1.3 the server checks the client's certificate after the
	// client's handshake returns: its verdict comes with the first read
	// (EOF when it accepted and closed).
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		return "", err
	}
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func TestServerReloadsARenewedCertificate(t *testing.T) {
	certs := testenv.NewCerts(t)
	var reloadErrs []error
	cfg, err := certs.Server(true).Config(func(err error) { reloadErrs = append(reloadErrs, err) })
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	first, err := dial(addr, certs.Client())
	if err != nil {
		t.Fatalf("mutual TLS with the test CA: %v", err)
	}
	if err := certs.Sign(certs.ServerCertFile, certs.ServerKey, "localhost"); err != nil {
		t.Fatal(err)
	}
	// The server looks at its files at most once a second.
	testenv.WaitFor(t, 10*time.Second, "the renewed certificate to be served", func() bool {
		got, err := dial(addr, certs.Client())
		return err == nil && got != first
	})
	if len(reloadErrs) > 0 {
		t.Fatalf("reload errors: %v", reloadErrs)
	}
}

func TestClientErrorsNameWhatToFix(t *testing.T) {
	certs := testenv.NewCerts(t)
	cfg, err := certs.Server(true).Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	untrusted := certs.Client()
	untrusted.CAFile = certs.OtherCAFile
	if _, err := dial(addr, untrusted); !errors.As(err, new(x509.UnknownAuthorityError)) {
		t.Fatalf("a server certificate from another CA: %v", err)
	}
	noCert := certs.Client()
	noCert.CertFile, noCert.KeyFile = "", ""
	if _, err := dial(addr, noCert); err == nil {
		t.Fatal("a server asking for a client certificate accepted a client without one")
	}
	if _, err := (tlsfiles.Client{CAFile: certs.Dir + "/missing.pem"}).Config(); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("a missing CA file: %v", err)
	}
	if _, err := (tlsfiles.Client{CertFile: certs.ClientCertFile}).Config(); err == nil || !strings.Contains(err.Error(), "key file") {
		t.Fatalf("a cert without its key: %v", err)
	}
	if cfg, _ := (tlsfiles.Client{}).Config(); cfg != nil {
		t.Fatal("the zero Client asked for TLS")
	}
}
