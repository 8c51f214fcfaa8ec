package consul

import (
	"bytes"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// DefaultAddr is the Consul agent's HTTP address when none is given.
const DefaultAddr = "127.0.0.1:8500"

// Config is how a part reaches Consul: the agent's address, the ACL token
// it sends and the TLS it dials with. Every part embeds it, so its fields
// keep the names (ConsulAddr) and flags (--consul-addr) they had as plain
// fields. Nothing is read from Consul's own CONSUL_HTTP_* variables: a
// part's settings are its flags and their SLUICE_* variables only.
type Config struct {
	// ConsulAddr is the agent's HTTP address, host:port. Default
	// "127.0.0.1:8500" (DefaultAddr) for the parts that need Consul.
	ConsulAddr string
	// ConsulToken is the ACL token sent with every request (the
	// X-Consul-Token header), inline or, better, from a file. The file is
	// read at start and again whenever Consul refuses a request (403), so
	// a rotated token is picked up without a restart: the request is sent
	// again once with the new token. Default: none (Consul's anonymous
	// token).
	ConsulToken cli.Secret
	// ConsulTLS dials the agent's HTTPS port: the CA that signs its
	// certificate, a client certificate when the agent verifies incoming
	// connections. Default: plain HTTP. No flag sets
	// ConsulTLS.InsecureSkipVerify (tests only).
	ConsulTLS tlsfiles.Client
}

// DefaultConfig is DefaultAddr, no token, plain HTTP.
func DefaultConfig() Config { return Config{ConsulAddr: DefaultAddr} }

// RegisterFlags adds --consul-addr, --consul-token, --consul-token-file and
// the --consul-tls* flags to fs, bound to c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ConsulAddr, "consul-addr", c.ConsulAddr, "Consul HTTP address (host:port; the HTTPS port with --consul-tls)")
	cli.SecretVar(fs, &c.ConsulToken, "consul-token", "the Consul ACL token (docs/secure/consul.md for the policy each part needs)")
	c.ConsulTLS.Register(fs, "consul", "Consul")
}

// Client builds an API client for the part named part ("relay"), which
// its errors name. It connects to nothing yet. Its requests carry the
// token; a request Consul refuses fails with a *DeniedError naming the
// part, the rule missing and the flags to fix, and a certificate the
// client does not trust with an error naming --consul-tls-ca-file.
func (c Config) Client(part string) (*api.Client, error) {
	if c.ConsulAddr == "" {
		return nil, fmt.Errorf("%s: Config.ConsulAddr (--consul-addr) is empty", part)
	}
	if strings.Contains(c.ConsulAddr, "://") {
		return nil, fmt.Errorf("%s: Config.ConsulAddr %q: give host:port, without a scheme (--consul-tls picks https)", part, c.ConsulAddr)
	}
	tc, err := c.ConsulTLS.Config()
	if err != nil {
		return nil, fmt.Errorf("%s: Consul TLS (--consul-tls-*): %w", part, err)
	}
	t := &transport{part: part, token: c.ConsulToken, tls: c.ConsulTLS.Enabled()}
	if _, err := t.current(); err != nil {
		return nil, err
	}
	base := cleanhttp.DefaultPooledTransport()
	base.TLSClientConfig = tc
	t.base = base
	scheme := "http"
	if tc != nil {
		scheme = "https"
	}
	// The token goes in by the transport, not api.Config.Token: left
	// empty there, NewClient would take CONSUL_HTTP_TOKEN, and a token
	// set there could never change.
	return api.NewClient(&api.Config{
		Address:    c.ConsulAddr,
		Scheme:     scheme,
		Transport:  base,
		HttpClient: &http.Client{Transport: t},
	})
}

// tokenHeader is the header Consul reads the ACL token from.
const tokenHeader = "X-Consul-Token"

// transport puts the current token on every request and turns Consul's
// refusals and TLS failures into errors that say what to fix.
type transport struct {
	base  http.RoundTripper
	part  string
	tls   bool
	token cli.Secret

	mu     sync.Mutex
	cached string
	loaded bool
}

// current is the token in use, read from the file the first time.
func (t *transport) current() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.loaded {
		v, err := t.token.Read()
		if err != nil {
			return "", fmt.Errorf("%s: Consul token (--consul-token-file): %w", t.part, err)
		}
		t.cached, t.loaded = v, true
	}
	return t.cached, nil
}

// reread reads the token file again after a refusal and reports whether
// it holds another token than used. A file that cannot be read now keeps
// the token in use.
func (t *transport) reread(used string) (string, bool) {
	if t.token.File == "" {
		return used, false
	}
	v, err := t.token.Read()
	if err != nil || v == used {
		return used, false
	}
	t.mu.Lock()
	t.cached = v
	t.mu.Unlock()
	return v, true
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	token, err := t.current()
	if err != nil {
		closeBody(req)
		return nil, err
	}
	resp, err := t.send(req, token)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		return resp, err
	}
	body := readBody(resp)
	if fresh, changed := t.reread(token); changed && resendable(req) {
		again := req.Clone(req.Context())
		if req.GetBody != nil {
			if again.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		if resp, err = t.send(again, fresh); err != nil || resp.StatusCode != http.StatusForbidden {
			return resp, err
		}
		token, body = fresh, readBody(resp)
	}
	return nil, t.denied(req, token != "", body)
}

// send sends req with token (none: no header, whatever the caller set),
// and checks what came back besides a 403.
func (t *transport) send(req *http.Request, token string) (*http.Response, error) {
	r := req.Clone(req.Context())
	if token != "" {
		r.Header.Set(tokenHeader, token)
	} else {
		r.Header.Del(tokenHeader)
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, t.explainTLS(err)
	}
	switch {
	case resp.StatusCode == http.StatusBadRequest && !t.tls:
		// What Consul's HTTPS port answers a plain HTTP request.
		body := readBody(resp)
		if strings.Contains(body, "HTTP request to an HTTPS server") {
			return nil, fmt.Errorf("%s: Consul at %s serves HTTPS: set --consul-tls and --consul-tls-ca-file", t.part, req.URL.Host)
		}
		resp.Body = io.NopCloser(strings.NewReader(body))
	case req.Method == http.MethodGet && resp.Header.Get("X-Consul-Results-Filtered-By-ACLs") == "true":
		// A list the token may read only in part (or not at all: then
		// a 404, as for no keys): a missing key would read as "no
		// limit", so it is a refusal, not an answer.
		readBody(resp)
		return nil, t.denied(req, token != "", "keys left out of the answer: the token may not read them")
	}
	return resp, nil
}

// explainTLS names the flag that mends a TLS failure.
func (t *transport) explainTLS(err error) error {
	var unknown x509.UnknownAuthorityError
	msg := err.Error()
	switch {
	case errors.As(err, &unknown) || strings.Contains(msg, "certificate signed by unknown authority"):
		return fmt.Errorf("%s: Consul's certificate is not signed by a CA this part trusts: give the CA that signed it with --consul-tls-ca-file: %w", t.part, err)
	case strings.Contains(msg, "x509: certificate is valid for") || strings.Contains(msg, "x509: certificate is not valid for"):
		return fmt.Errorf("%s: Consul's certificate is not for the host dialled: set --consul-tls-server-name to a name it holds: %w", t.part, err)
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%s: Consul serves plain HTTP at this address: drop --consul-tls, or give --consul-addr its HTTPS port: %w", t.part, err)
	case strings.Contains(msg, "tls: certificate required") || strings.Contains(msg, "tls: bad certificate"):
		return fmt.Errorf("%s: Consul wants a client certificate it trusts: give one with --consul-tls-cert-file and --consul-tls-key-file: %w", t.part, err)
	}
	return err
}

// DeniedError is a request Consul refused for want of an ACL: the token
// is unknown (or none was given), or its policy lacks the rule. Retrying
// with the same token cannot help.
type DeniedError struct {
	// Part is the part whose request it was ("relay").
	Part string
	// Op is what was refused, as "write key sluice/dev/relay/jobs/lock".
	Op string
	// Rule is the ACL rule that allows Op.
	Rule string
	// Reason is Consul's answer ("ACL not found", "Permission denied").
	Reason string
	// NoToken: the request carried no token.
	NoToken bool
}

func (e *DeniedError) Error() string {
	var why string
	switch {
	case e.NoToken:
		why = "no token was given (the anonymous token's policy denies it): set --consul-token-file (or --consul-token)"
	case strings.Contains(e.Reason, "ACL not found"):
		why = "Consul does not know the token of --consul-token-file (or --consul-token): it is wrong, deleted or expired"
	default:
		why = "the policy of the token of --consul-token-file (or --consul-token) lacks " + e.Rule
	}
	return fmt.Sprintf("%s: Consul denied %s (%s): %s; `sluice consul-policy %s` prints the policy it needs (docs/secure/consul.md)",
		e.Part, e.Op, e.Reason, why, e.Part)
}

// IsDenied reports whether err is, or wraps, a *DeniedError.
func IsDenied(err error) bool {
	var d *DeniedError
	return errors.As(err, &d)
}

// denied describes the refusal of req.
func (t *transport) denied(req *http.Request, withToken bool, body string) error {
	op, rule := describe(req)
	reason := strings.TrimSpace(body)
	if reason == "" {
		reason = "403 Forbidden"
	}
	return &DeniedError{Part: t.part, Op: op, Rule: rule, Reason: reason, NoToken: !withToken}
}

// describe names what req asked for and the rule that allows it.
func describe(req *http.Request) (op, rule string) {
	path := req.URL.Path
	if key, ok := strings.CutPrefix(path, "/v1/kv/"); ok {
		key, _ = url.PathUnescape(key)
		q := req.URL.Query()
		switch {
		case req.Method == http.MethodGet && (q.Has("recurse") || q.Has("keys")):
			return "list of keys under " + key, fmt.Sprintf(`key_prefix %q { policy = "read" }`, key)
		case req.Method == http.MethodGet:
			return "read of key " + key, fmt.Sprintf(`key %q { policy = "read" } (or a key_prefix over it)`, key)
		default:
			return "write of key " + key, fmt.Sprintf(`key %q { policy = "write" } (or a key_prefix over it)`, key)
		}
	}
	if what, ok := strings.CutPrefix(path, "/v1/session/"); ok {
		what, _, _ = strings.Cut(what, "/")
		return "session " + what, `session_prefix "" { policy = "write" } (or session "<the agent's node>")`
	}
	return req.Method + " " + path, "the rule for " + path
}

// readBody reads a small answer and closes it.
func readBody(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return string(bytes.TrimSpace(b))
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// resendable: a request whose body can be sent again.
func resendable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}
