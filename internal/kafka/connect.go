package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/IBM/sarama"
)

// The kinds of connection failure Explain recognises; test them with
// errors.Is on its result.
var (
	// ErrSASLFailed: the brokers refused the SASL user, password or
	// mechanism.
	ErrSASLFailed = errors.New("Kafka SASL authentication failed")
	// ErrSASLRequired: the brokers want SASL and none is configured.
	ErrSASLRequired = errors.New("Kafka requires SASL authentication")
	// ErrTLSUntrusted: a broker's certificate is not signed by a trusted CA.
	ErrTLSUntrusted = errors.New("Kafka's TLS certificate is not trusted")
	// ErrTLS: any other TLS failure (a name or date that does not fit, a
	// client certificate refused, one side not speaking TLS).
	ErrTLS = errors.New("Kafka TLS handshake failed")
)

// ConnectError is a failure to reach Kafka whose cause is known: what went
// wrong, what to change (naming the Config field and the flag), and the
// client library's own error.
type ConnectError struct {
	Kind    error  // ErrSASLFailed, ErrSASLRequired, ErrTLSUntrusted or ErrTLS
	Problem string // what went wrong, at which broker
	Fix     string // what to change
	Err     error  // sarama's error
}

func (e *ConnectError) Error() string {
	return e.Problem + ": " + e.Fix + " (" + e.Err.Error() + ")"
}

// Unwrap lets errors.Is find both the kind and sarama's error.
func (e *ConnectError) Unwrap() []error { return []error{e.Kind, e.Err} }

// Connect returns a sarama client of c.Brokers with sc (c.Sarama(), tuned
// by the caller). A failure is explained as Explain does.
func (c *Config) Connect(ctx context.Context, sc *sarama.Config) (sarama.Client, error) {
	client, err := sarama.NewClient(c.Brokers, sc)
	if err != nil {
		return nil, c.Explain(ctx, sc, fmt.Errorf("connect to Kafka %v: %w", []string(c.Brokers), err))
	}
	return client, nil
}

// probeTimeout bounds each network step of the diagnosis.
const probeTimeout = 5 * time.Second

// Explain returns err, a failure to reach c's brokers with sc, as a
// *ConnectError when its cause is a security setting: a refused SASL
// login, SASL the brokers want and c lacks, an untrusted certificate or
// another TLS failure. Otherwise it returns err as it is.
//
// Sarama's error alone often does not tell: a broker that refuses a login
// may just close the connection (kfake does; Kafka does with SASL v0), and
// so does a TLS listener dialled in plain TCP. Then Explain dials one
// broker again step by step (TCP and TLS, a request before any login, the
// login) to find the step that fails; it returns at ctx's end.
func (c *Config) Explain(ctx context.Context, sc *sarama.Config, err error) error {
	if err == nil || errors.As(err, new(*ConnectError)) {
		return err
	}
	if ce := c.classify("", err); ce != nil {
		return ce
	}
	if !probeWorthy(err) {
		return err
	}
	done := make(chan *ConnectError, 1)
	go func() { done <- c.diagnose(sc, err) }()
	select {
	case ce := <-done:
		if ce != nil {
			return ce
		}
	case <-ctx.Done():
	}
	return err
}

// probeWorthy reports errors that a dial step by step may explain: the
// connection closed, reset, timed out or answered garbage, or every broker
// failed for a reason sarama only logged (a real Kafka refusing the SASL
// mechanism leaves just ErrOutOfBrokers). A refused or unresolvable
// address is what it says: the probe cannot dial it either.
func probeWorthy(err error) bool {
	var nerr net.Error
	var derr sarama.PacketDecodingError
	return errors.Is(err, io.EOF) || errors.Is(err, sarama.ErrOutOfBrokers) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.As(err, &derr) ||
		(errors.As(err, &nerr) && nerr.Timeout()) || errors.Is(err, os.ErrDeadlineExceeded)
}

// classify recognises the failures that sarama's error names itself: a
// broker's SASL error code, or a certificate check that failed.
func (c *Config) classify(addr string, err error) *ConnectError {
	at := ""
	if addr != "" {
		at = " at " + addr
	}
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
		header   tls.RecordHeaderError
		op       *net.OpError
	)
	switch {
	case errors.Is(err, sarama.ErrSASLAuthenticationFailed):
		return c.saslFailed(at, err)
	case errors.Is(err, sarama.ErrUnsupportedSASLMechanism):
		return &ConnectError{Kind: ErrSASLFailed, Err: err,
			Problem: fmt.Sprintf("Kafka SASL authentication failed: the broker%s does not enable the mechanism %s", at, c.SASL.Mechanism),
			Fix:     "set Config.Kafka.SASL.Mechanism (--kafka-sasl-mechanism) to one the broker's listener enables (sasl.enabled.mechanisms)"}
	case errors.As(err, &unknown):
		fix := "set Config.Kafka.TLS.CAFile (--kafka-tls-ca-file) to the PEM file of the CA that signed the brokers' certificates"
		if c.TLS.CAFile != "" {
			fix += fmt.Sprintf(" (%s does not hold it)", c.TLS.CAFile)
		} else {
			fix += " (none is set: the system's roots do not hold it)"
		}
		return &ConnectError{Kind: ErrTLSUntrusted, Err: err, Fix: fix,
			Problem: fmt.Sprintf("Kafka's TLS certificate%s is not trusted: it is signed by a CA sluice does not trust", at)}
	case errors.As(err, &hostname):
		return &ConnectError{Kind: ErrTLS, Err: err,
			Problem: fmt.Sprintf("Kafka's TLS certificate%s does not name the host dialled (%q)", at, hostname.Host),
			Fix:     "dial the brokers by a name their certificate holds (Config.Kafka.Brokers, --kafka-brokers), or set Config.Kafka.TLS.ServerName (--kafka-tls-server-name) to one"}
	case errors.As(err, &invalid):
		return &ConnectError{Kind: ErrTLS, Err: err,
			Problem: fmt.Sprintf("Kafka's TLS certificate%s is not valid (expired, not yet valid, or not for a server)", at),
			Fix:     "renew the brokers' certificate; sluice's TLS settings are Config.Kafka.TLS (--kafka-tls-*)"}
	case errors.As(err, &verify):
		return &ConnectError{Kind: ErrTLS, Err: err,
			Problem: fmt.Sprintf("Kafka's TLS certificate%s failed verification", at),
			Fix:     "check the brokers' certificate against Config.Kafka.TLS.CAFile (--kafka-tls-ca-file) and Config.Kafka.TLS.ServerName (--kafka-tls-server-name)"}
	// An alert the broker sent: crypto/tls reports it to a TCP client as
	// a "remote error" (tls.AlertError is QUIC's).
	case errors.As(err, &alert), errors.As(err, &op) && op.Op == "remote error":
		return &ConnectError{Kind: ErrTLS, Err: err,
			Problem: fmt.Sprintf("the Kafka broker%s refused the TLS handshake (%v)", at, tlsAlert(err)),
			Fix:     "if its listener asks for a client certificate, set Config.Kafka.TLS.CertFile and .KeyFile (--kafka-tls-cert-file, --kafka-tls-key-file) to one its CA signed"}
	case errors.As(err, &header):
		return &ConnectError{Kind: ErrTLS, Err: err,
			Problem: fmt.Sprintf("the Kafka broker%s does not speak TLS", at),
			Fix:     "turn Config.Kafka.TLS off (drop --kafka-tls and --kafka-tls-* files) for a plaintext listener, or dial the brokers' TLS listener (--kafka-brokers)"}
	}
	return nil
}

func (c *Config) saslFailed(at string, err error) *ConnectError {
	return &ConnectError{Kind: ErrSASLFailed, Err: err,
		Problem: fmt.Sprintf("Kafka SASL authentication failed: the broker%s refused user %q with %s", at, c.SASL.User, c.SASL.Mechanism),
		Fix: "check Config.Kafka.SASL.User and Config.Kafka.SASL.Password (--kafka-sasl-user, --kafka-sasl-password-file or --kafka-sasl-password), " +
			"and that the broker has this user for Config.Kafka.SASL.Mechanism (--kafka-sasl-mechanism)"}
}

// diagnose dials the brokers one at a time, step by step, and explains
// the first step that fails; nil when none does, or none can be reached.
func (c *Config) diagnose(sc *sarama.Config, cause error) *ConnectError {
	for _, addr := range c.Brokers {
		if ce := c.diagnoseBroker(addr, sc, cause); ce != nil {
			return ce
		}
	}
	return nil
}

func (c *Config) diagnoseBroker(addr string, sc *sarama.Config, cause error) *ConnectError {
	// 1. TCP and TLS, then a request every broker answers before a login.
	plain := probeConfig(sc)
	plain.Net.SASL.Enable, plain.Net.SASL.User, plain.Net.SASL.Password = false, "", ""
	plain.ApiVersionsRequest = false // Open only dials; the request below is the first
	b := sarama.NewBroker(addr)
	if b.Open(plain) != nil {
		return nil
	}
	defer b.Close()
	if ok, err := b.Connected(); !ok || err != nil {
		return nil // not reached: the cause says why
	}
	if _, err := b.ApiVersions(&sarama.ApiVersionsRequest{Version: 0}); err != nil {
		if ce := c.classify(addr, err); ce != nil {
			return ce
		}
		if c.TLS.Enabled() {
			return &ConnectError{Kind: ErrTLS, Err: cause,
				Problem: fmt.Sprintf("the Kafka broker at %s does not answer over TLS (%v)", addr, err),
				Fix:     "its listener may be plaintext: turn Config.Kafka.TLS off (drop --kafka-tls and the --kafka-tls-* files), or dial the brokers' TLS listener (--kafka-brokers)"}
		}
		return &ConnectError{Kind: ErrTLS, Err: cause,
			Problem: fmt.Sprintf("the Kafka broker at %s closed the connection at the first request (%v)", addr, err),
			Fix:     "its listener may want TLS: set Config.Kafka.TLS (--kafka-tls, and --kafka-tls-ca-file for a private CA)"}
	}
	if !c.SASL.Enabled() {
		// 2. Without SASL, a request a login would have to come before.
		if _, err := b.GetMetadata(sarama.NewMetadataRequest(sc.Version, nil)); err != nil && probeWorthy(err) {
			return &ConnectError{Kind: ErrSASLRequired, Err: cause,
				Problem: fmt.Sprintf("the Kafka broker at %s closed the connection at the first request past the handshake: its listener wants SASL authentication", addr),
				Fix:     "set Config.Kafka.SASL.Mechanism, .User and .Password (--kafka-sasl-mechanism, --kafka-sasl-user, --kafka-sasl-password-file)"}
		}
		return nil
	}
	// 2. The login itself, over a connection known to work.
	login := probeConfig(sc)
	lb := sarama.NewBroker(addr)
	if lb.Open(login) != nil {
		return nil
	}
	defer lb.Close()
	_, err := lb.Connected()
	if err == nil {
		return nil
	}
	if ce := c.classify(addr, err); ce != nil {
		return ce
	}
	return c.saslFailed(" at "+addr, cause)
}

// probeConfig is sc with short timeouts and no retries, for one broker.
func probeConfig(sc *sarama.Config) *sarama.Config {
	pc := *sc
	pc.Net.DialTimeout, pc.Net.ReadTimeout, pc.Net.WriteTimeout = probeTimeout, probeTimeout, probeTimeout
	pc.Metadata.Retry.Max = 0
	return &pc
}

// tlsAlert is the alert a broker sent, as crypto/tls words it ("tls:
// certificate required"), or err.
func tlsAlert(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}
