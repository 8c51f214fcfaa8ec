package tlsfiles

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// ClientSettings names, for an error's fix, where a client's TLS is set:
// its flags ("--admin-tls-ca-file") or its Config fields
// ("client.Config.CAFile"), as the client's user sets them.
type ClientSettings struct {
	// CAFile is the setting of the CAs trusted for the server's
	// certificate.
	CAFile string
	// CertFile is the setting of the client certificate (and its key).
	CertFile string
	// ServerName is the setting of the name checked in the server's
	// certificate; "" when the client has none.
	ServerName string
}

// HandshakeError is a TLS failure between a client and the server it
// dialled that trying again will not mend: an untrusted certificate, a
// certificate for another name, a client certificate refused or missing.
// Fix says which setting to change.
type HandshakeError struct {
	Err error
	Fix string
}

func (e *HandshakeError) Error() string { return fmt.Sprintf("%v; %s", e.Err, e.Fix) }
func (e *HandshakeError) Unwrap() error { return e.Err }

// Explain returns err as a *HandshakeError naming the setting to fix when
// it is one of the TLS failures a setting mends, else err unchanged (nil
// for nil). It never adds a secret: only the names in s.
func (s ClientSettings) Explain(err error) error {
	if err == nil {
		return nil
	}
	var he *HandshakeError
	if errors.As(err, &he) {
		return err
	}
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &unknown) || strings.Contains(msg, "certificate signed by unknown authority"):
		return &HandshakeError{Err: err, Fix: "the server's certificate is not signed by a CA this client trusts: give the CA that signed it with " + s.CAFile}
	case errors.As(err, &hostname):
		fix := "the server's certificate is not for the host dialled: dial a name it holds"
		if s.ServerName != "" {
			fix += ", or set " + s.ServerName
		}
		return &HandshakeError{Err: err, Fix: fix}
	case errors.As(err, &invalid):
		return &HandshakeError{Err: err, Fix: "the server's certificate is not valid (expired, or not for a server): renew it on the server"}
	case strings.Contains(msg, "tls: certificate required"):
		return &HandshakeError{Err: err, Fix: "the server requires a client certificate (mutual TLS): give one with " + s.CertFile}
	case strings.Contains(msg, "tls: bad certificate") || strings.Contains(msg, "tls: unknown certificate authority"):
		return &HandshakeError{Err: err, Fix: "the server refused this client's certificate: give one its client CA signed with " + s.CertFile}
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return &HandshakeError{Err: err, Fix: "the server serves plain HTTP: use an http:// URL, or start it with its --tls-cert-file and --tls-key-file"}
	}
	return err
}
