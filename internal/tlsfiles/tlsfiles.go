// Package tlsfiles builds TLS configurations from PEM files, the one way
// every sluice part takes certificates: a Client for what a part dials
// (Kafka, Redis, Consul, the gate or console from the Go client and CLI), a
// Server for what it serves (the gate, the console). A server re-reads its
// certificate when the files change, so a renewed certificate needs no
// restart.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Client is the TLS a part uses to dial a service. The zero value is plain
// TCP.
type Client struct {
	// Enable turns TLS on with the system's roots when no CAFile is given.
	// Default false; any file below turns TLS on as well.
	Enable bool
	// CAFile is a PEM bundle of the CAs trusted for the service's
	// certificate. Default "": the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and its key, for a
	// service that asks for one (mutual TLS). Default "": none.
	CertFile, KeyFile string
	// ServerName is the name checked in the service's certificate.
	// Default "": the host of the address dialled.
	ServerName string
	// InsecureSkipVerify accepts any certificate: for a test only.
	// Default false. No flag.
	InsecureSkipVerify bool
}

// Enabled reports whether the Client asks for TLS.
func (c Client) Enabled() bool {
	return c.Enable || c.CAFile != "" || c.CertFile != "" || c.KeyFile != ""
}

// Register adds <prefix>-tls, <prefix>-tls-ca-file, <prefix>-tls-cert-file,
// <prefix>-tls-key-file and <prefix>-tls-server-name to fs, bound to c, for
// the service named by what (as "Kafka").
func (c *Client) Register(fs *flag.FlagSet, prefix, what string) {
	fs.BoolVar(&c.Enable, prefix+"-tls", c.Enable, "dial "+what+" over TLS (implied by any --"+prefix+"-tls-* file)")
	fs.StringVar(&c.CAFile, prefix+"-tls-ca-file", c.CAFile, "PEM file of the CAs that sign "+what+"'s certificate (default: the system's roots)")
	fs.StringVar(&c.CertFile, prefix+"-tls-cert-file", c.CertFile, "PEM client certificate for "+what+" (mutual TLS)")
	fs.StringVar(&c.KeyFile, prefix+"-tls-key-file", c.KeyFile, "PEM key of --"+prefix+"-tls-cert-file")
	fs.StringVar(&c.ServerName, prefix+"-tls-server-name", c.ServerName, "name to check in "+what+"'s certificate (default: the host dialled)")
}

// Config returns the tls.Config the Client describes, or nil when it does
// not ask for TLS. Its errors name the file at fault.
func (c Client) Config() (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify}
	if c.CAFile != "" {
		pool, err := LoadCAs(c.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("tls: a client certificate needs both its cert file and its key file")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client certificate %s / %s: %w", c.CertFile, c.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// LoadCAs reads a PEM bundle of CA certificates.
func LoadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", file)
	}
	return pool, nil
}

// Server is the TLS a part serves with. The zero value serves plain HTTP.
type Server struct {
	// CertFile and KeyFile are the server's PEM certificate (with its
	// chain) and key. Both or neither. Default "": plain HTTP. They are
	// re-read when either file changes (checked at most once a second, on
	// a handshake), so a renewed certificate needs no restart.
	CertFile, KeyFile string
	// ClientCAFile, when set, asks every client for a certificate signed
	// by one of its CAs (mutual TLS). Default "": no client certificate.
	ClientCAFile string
}

// Enabled reports whether the Server serves TLS.
func (s Server) Enabled() bool { return s.CertFile != "" || s.KeyFile != "" }

// Register adds <prefix>tls-cert-file, <prefix>tls-key-file and
// <prefix>tls-client-ca-file to fs, bound to s. prefix is "" or ends in a
// dash ("admin-").
func (s *Server) Register(fs *flag.FlagSet, prefix, what string) {
	fs.StringVar(&s.CertFile, prefix+"tls-cert-file", s.CertFile, "serve "+what+" over HTTPS with this PEM certificate (re-read when it changes)")
	fs.StringVar(&s.KeyFile, prefix+"tls-key-file", s.KeyFile, "PEM key of --"+prefix+"tls-cert-file (re-read when it changes)")
	fs.StringVar(&s.ClientCAFile, prefix+"tls-client-ca-file", s.ClientCAFile, "require client certificates signed by these PEM CAs on "+what)
}

// Config loads the certificate once, so that a bad file is an error at
// start, and returns a tls.Config that reloads it when the files change.
// A reload that fails keeps the last good certificate and reports through
// onReloadError (may be nil). It returns nil when the Server is not
// Enabled.
func (s Server) Config(onReloadError func(error)) (*tls.Config, error) {
	if !s.Enabled() {
		return nil, nil
	}
	if s.CertFile == "" || s.KeyFile == "" {
		return nil, errors.New("tls: serving HTTPS needs both a cert file and a key file")
	}
	r := &reloader{cert: s.CertFile, key: s.KeyFile, onError: onReloadError, now: time.Now}
	if err := r.load(); err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	if s.ClientCAFile != "" {
		pool, err := LoadCAs(s.ClientCAFile)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// ForPart is Config for a part's Config.TLS (part names it in errors, as
// "gate"): its errors name the Config field at fault, a ClientCAFile
// without HTTPS is refused, and a renewed certificate that fails to load
// is logged on log while the last good one is served on. It returns nil
// when the Server is not Enabled.
func (s Server) ForPart(part string, log *slog.Logger) (*tls.Config, error) {
	if s.ClientCAFile != "" {
		if !s.Enabled() {
			return nil, fmt.Errorf("%s: Config.TLS.ClientCAFile asks clients for certificates, which needs HTTPS: set Config.TLS.CertFile and Config.TLS.KeyFile too", part)
		}
		if _, err := LoadCAs(s.ClientCAFile); err != nil {
			return nil, fmt.Errorf("%s: Config.TLS.ClientCAFile: %w", part, err)
		}
	}
	tc, err := s.Config(func(err error) {
		log.Error("the renewed TLS certificate does not load: serving the last good one", "err", err)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: Config.TLS.CertFile, Config.TLS.KeyFile: %w", part, err)
	}
	return tc, nil
}

// reloader holds the current certificate and the files' stamps it came from.
type reloader struct {
	cert, key string
	onError   func(error)
	now       func() time.Time

	mu      sync.Mutex
	current *tls.Certificate
	stamp   string    // of the files current came from
	checked time.Time // when stamp was last compared
}

func fileStamp(files ...string) (string, error) {
	var s string
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
	}
	return s, nil
}

func (r *reloader) load() error {
	stamp, err := fileStamp(r.cert, r.key)
	if err != nil {
		return fmt.Errorf("tls: server certificate: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		return fmt.Errorf("tls: server certificate %s / %s: %w", r.cert, r.key, err)
	}
	r.current, r.stamp = &cert, stamp
	return nil
}

// reloadEvery bounds how often a handshake looks at the files.
const reloadEvery = time.Second

func (r *reloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= reloadEvery {
		r.checked = now
		if stamp, err := fileStamp(r.cert, r.key); err == nil && stamp != r.stamp {
			if err := r.load(); err != nil && r.onError != nil {
				r.onError(err)
			}
		}
	}
	return r.current, nil
}
