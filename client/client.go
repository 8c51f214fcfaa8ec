package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/retry"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// Config configures a Client. Only URL is required; every other field's
// zero value means its stated default.
type Config struct {
	// URL is the gate's base URL, for example "http://127.0.0.1:8080"
	// (sluice dev's gate). Required.
	URL string
	// Token is the bearer token sent as "Authorization: Bearer <Token>".
	// Default: none (a gate started with --allow-no-auth, as sluice dev's).
	Token string
	// HTTPClient sends the requests. Default: http.DefaultClient, or, with
	// TLS or a file below, a client of its own with that TLS. Each call is
	// bounded by its context; a Timeout set here bounds each send. Set
	// either HTTPClient or the TLS settings below, not both (New refuses).
	HTTPClient *http.Client
	// TLS is the TLS of an https:// URL: the CAs trusted for the gate's
	// certificate (RootCAs), a client certificate for a gate that asks
	// for one (mutual TLS). The files below are added to a clone of it.
	// Default nil: the system's roots, no client certificate.
	TLS *tls.Config
	// CAFile is a PEM bundle of the CAs that sign the gate's certificate:
	// a private CA's. Default "": TLS.RootCAs, else the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// a gate started with --tls-client-ca-file. Both or neither. Default
	// "": none.
	CertFile, KeyFile string
	// Retry bounds the retries of 503s, 504s and connection errors.
	// Default: DefaultRetryPolicy().
	Retry RetryPolicy
}

// RetryPolicy bounds the retries of one call. Zero fields take their
// defaults.
type RetryPolicy struct {
	// MaxAttempts is how many sends one call makes at most, the first
	// included; 1 turns retries off. Default: 10.
	MaxAttempts int
	// MinBackoff is the wait after the first failed send; it doubles per
	// send up to MaxBackoff, spread by ±20%. A 503's Retry-After is waited
	// for when longer (up to MaxBackoff). Default: 100ms.
	MinBackoff time.Duration
	// MaxBackoff bounds one wait. Default: 5s.
	MaxBackoff time.Duration
}

// DefaultRetryPolicy is the policy a zero RetryPolicy means: 10 sends,
// backoff from 100ms doubling to 5s (about 20 s of waiting in all).
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 10, MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.MinBackoff <= 0 {
		p.MinBackoff = d.MinBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = d.MaxBackoff
	}
	p.MaxBackoff = max(p.MaxBackoff, p.MinBackoff)
	return p
}

// Client talks to one gate (or a load balancer in front of several). It is
// safe for concurrent use.
type Client struct {
	base  string
	token string
	http  *http.Client
	retry RetryPolicy
}

// tlsSettings name, in a handshake error's fix, the settings that mend it.
var tlsSettings = tlsfiles.ClientSettings{
	CAFile:     "client.Config.CAFile (or Config.TLS.RootCAs)",
	CertFile:   "client.Config.CertFile and Config.KeyFile (or Config.TLS.Certificates)",
	ServerName: "client.Config.TLS.ServerName",
}

// New checks cfg and returns a Client. It sends nothing.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: Config.URL %q: want the gate's base URL, like http://127.0.0.1:8080", cfg.URL)
	}
	c := &Client{base: strings.TrimRight(cfg.URL, "/"), token: cfg.Token, http: cfg.HTTPClient, retry: cfg.Retry.withDefaults()}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	switch {
	case tc != nil && c.http != nil:
		return nil, errors.New("client: Config.HTTPClient and Config.TLS (or CAFile, CertFile, KeyFile): set the TLS on HTTPClient's Transport, or leave HTTPClient nil")
	case tc != nil:
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tc
		c.http = &http.Client{Transport: t}
	case c.http == nil:
		c.http = http.DefaultClient
	}
	return c, nil
}

// tlsConfig is Config.TLS with the files added; nil when none is set. Its
// errors name the field.
func (cfg Config) tlsConfig() (*tls.Config, error) {
	files := tlsfiles.Client{CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile}
	if cfg.TLS == nil && !files.Enabled() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLS != nil {
		tc = cfg.TLS.Clone()
	}
	if !files.Enabled() {
		return tc, nil
	}
	ft, err := files.Config()
	if err != nil {
		return nil, fmt.Errorf("client: Config.CAFile, Config.CertFile, Config.KeyFile: %w", err)
	}
	if ft.RootCAs != nil {
		tc.RootCAs = ft.RootCAs
	}
	tc.Certificates = append(tc.Certificates, ft.Certificates...)
	return tc, nil
}

// exchange is one request as sent, possibly several times.
type exchange struct {
	method, path string
	header       http.Header
	body         []byte
	// retryable says whether an answer of this status (with this error
	// body, nil for a non-error answer) is sent again.
	retryable func(status int, eb *errorBody) bool
	// retryTransport says whether a connection error is retried; dial
	// errors, after which the gate saw nothing, always are.
	retryTransport bool
	// maxAttempts, when set, lowers the policy's bound: what a batch's
	// earlier requests left of it.
	maxAttempts int
}

// answer is a gate's answer.
type answer struct {
	status     int
	body       []byte
	retryAfter time.Duration
	attempts   int // sends it took
}

// errorBody is the gate's error answer.
type errorBody = job.ErrorBody

// once sends x one time.
func (c *Client) once(ctx context.Context, x *exchange) (answer, error) {
	var body io.Reader
	if x.body != nil {
		body = bytes.NewReader(x.body)
	}
	req, err := http.NewRequestWithContext(ctx, x.method, c.base+x.path, body)
	if err != nil {
		return answer{}, err
	}
	for k, v := range x.header {
		req.Header[k] = v
	}
	if x.body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// The caller's span, if ctx carries one, as the W3C traceparent (and
	// tracestate) header: the gate makes the job's trace a child of it
	// (docs/tracing.md). Nothing is sent for a ctx without a span.
	if req.Header.Get("Traceparent") == "" {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, body: b}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		a.retryAfter = time.Duration(s) * time.Second
	}
	return a, nil
}

// do sends x until the gate answers something x does not retry, the
// attempts run out, or ctx ends. A non-2xx answer it does not retry is an
// *Error; a connection error it gave up on is returned wrapped.
func (c *Client) do(ctx context.Context, x *exchange) (answer, error) {
	bound := c.retry.MaxAttempts
	if x.maxAttempts > 0 {
		bound = min(bound, x.maxAttempts)
	}
	for attempt := 1; ; attempt++ {
		a, err := c.once(ctx, x)
		a.attempts = attempt
		if ctx.Err() != nil {
			return a, ctx.Err()
		}
		var eb *errorBody
		retry := false
		switch {
		case err != nil:
			retry = (x.retryTransport || isDialError(err)) && !isHandshakeError(err)
		case a.status >= 300:
			eb = &errorBody{}
			_ = json.Unmarshal(a.body, eb) // not JSON: a proxy's page, say; the message falls back to the body
			retry = x.retryable(a.status, eb)
		default:
			retry = x.retryable(a.status, nil)
		}
		if err != nil && !retry {
			// A certificate no resend will mend: say which setting does.
			err = tlsSettings.Explain(err)
		}
		if !retry || attempt >= bound {
			if err != nil {
				return a, fmt.Errorf("client: %s %s: %d sends: %w", x.method, x.path, attempt, err)
			}
			if eb != nil && a.status >= 400 {
				if eb.Error == "" && !bytes.Contains(a.body, []byte(`"results"`)) {
					eb.Error = strings.TrimSpace(string(a.body))
				}
				return a, newError(a.status, eb, attempt)
			}
			return a, nil
		}
		wait := retryBackoff(c.retry, attempt, a.retryAfter)
		if err := sleep(ctx, wait); err != nil {
			return a, err
		}
	}
}

func retryBackoff(p RetryPolicy, attempt int, retryAfter time.Duration) time.Duration {
	return min(max(retry.Backoff(p.MinBackoff, p.MaxBackoff, attempt), retryAfter), p.MaxBackoff)
}

func sleep(ctx context.Context, d time.Duration) error { return retry.Sleep(ctx, d) }

// isDialError reports a connection that was never made: the gate saw
// nothing, so any request may be sent again.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// isHandshakeError reports a TLS failure that sending again will not
// mend (tlsfiles.ClientSettings.Explain knows them).
func isHandshakeError(err error) bool {
	var he *tlsfiles.HandshakeError
	return errors.As(tlsSettings.Explain(err), &he)
}

// retryableStatus is the policy of a request whose resend is safe: every
// job in it carries a client-chosen id.
func retryableStatus(status int, _ *errorBody) bool {
	return status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

func topicPath(topic string) string { return "/v1/topics/" + url.PathEscape(topic) }
