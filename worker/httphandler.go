package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/job"
)

// Limits of the built-in http handler.
const (
	// HTTPResultLimit caps the result kept from a 2xx response body; a
	// longer body is truncated, not an error.
	HTTPResultLimit = 64 << 10
	// HTTPMaxRetryAfter caps a receiver's Retry-After: a longer (or absurd)
	// value is cut to this.
	HTTPMaxRetryAfter = time.Hour

	// httpDrainLimit bounds how much of a response is read beyond what the
	// handler keeps, so the connection can be reused; past it the
	// connection is closed instead.
	httpDrainLimit = 256 << 10
	// httpErrorSnippet is how much of a failed response's body goes into
	// the error message.
	httpErrorSnippet = 512
	// httpNoDeadlineTimeout bounds a call whose context has no deadline at
	// all. The worker always sets one; this only guards direct callers.
	httpNoDeadlineTimeout = 5 * time.Minute
)

// Headers the http handler sets on every request, so receivers can dedupe
// (an attempt can be delivered more than once: at-least-once execution).
// The coordinator's group callbacks carry HeaderGroup and HeaderAttempt
// too: one definition, in internal/job.
const (
	HeaderJobID   = job.HeaderJobID
	HeaderJobType = job.HeaderJobType
	HeaderAttempt = job.HeaderAttempt
	HeaderGroup   = job.HeaderGroup
)

// HTTPHandler POSTs a job's payload to URL.
//
// The payload is sent byte for byte as the body (Content-Type
// application/json unless Header sets another), with the Sluice-Job-Id,
// Sluice-Job-Type, Sluice-Attempt and Sluice-Group headers. Outcomes:
//
//   - 2xx: success; the result is the response body, truncated to
//     HTTPResultLimit.
//   - 408 and 429: retried.
//   - other 4xx: Permanent, with the status and the start of the body.
//   - 3xx: Permanent; the default client does not follow redirects (a POST
//     turned into a GET would lose the payload), so configure the final URL.
//   - 5xx, connection errors, the context's deadline or cancellation:
//     retried.
//
// A retried status with a Retry-After header (seconds or an HTTP date)
// returns RetryAfter with that delay, capped at HTTPMaxRetryAfter; zero,
// negative, past or unparseable values are ignored and the worker's backoff
// decides.
type HTTPHandler struct {
	URL string
	// Client sends the requests. nil: a shared client with sensible
	// transport limits (dial and TLS handshake timeouts, pooled keep-alive
	// connections) and no client-level timeout: the job's context deadline
	// bounds each call.
	Client *http.Client
	// Header holds extra headers (e.g. Authorization). It may set
	// Content-Type or Host; the Sluice-* headers always come from the job.
	Header http.Header
}

var defaultHTTPClient = sync.OnceValue(func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ExpectContinueTimeout = time.Second
	t.IdleConnTimeout = 90 * time.Second
	t.MaxIdleConns = 512
	t.MaxIdleConnsPerHost = 64
	t.MaxResponseHeaderBytes = 64 << 10
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
})

// Handle POSTs job.Payload to h.URL; see HTTPHandler for the outcomes.
func (h *HTTPHandler) Handle(ctx context.Context, job *Job) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, httpNoDeadlineTimeout)
		defer cancel()
	}
	target := cli.RedactURL(h.URL)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(job.Payload))
	if err != nil {
		// A bad URL does not get better with retries.
		return nil, Permanent(fmt.Errorf("http handler: bad request for %s: %w", target, err))
	}
	for k, vs := range h.Header {
		req.Header[k] = append([]string(nil), vs...)
	}
	if host := h.Header.Get("Host"); host != "" {
		req.Host = host
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "sluice-worker")
	}
	req.Header.Set(HeaderJobID, job.ID)
	req.Header.Set(HeaderJobType, job.Type)
	req.Header.Set(HeaderAttempt, strconv.Itoa(job.Attempt))
	req.Header.Set(HeaderGroup, job.Group)

	client := h.Client
	if client == nil {
		client = defaultHTTPClient()
	}
	resp, err := client.Do(req)
	if err != nil {
		// Connection errors, timeouts and cancellation: retried. Report the
		// cause without the url.Error's full URL (it may carry a token).
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("http handler: POST %s: %w", target, err)
	}
	defer func() {
		// Bounded drain so the connection can be reused, then close.
		_, _ = io.CopyN(io.Discard, resp.Body, httpDrainLimit)
		_ = resp.Body.Close()
	}()

	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		// The receiver has answered 2xx: the job is done, even if the body
		// cannot be read to the end (a retry would only duplicate it).
		body, _ := io.ReadAll(io.LimitReader(resp.Body, HTTPResultLimit))
		if len(body) == 0 {
			return nil, nil
		}
		return body, nil
	}

	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, httpErrorSnippet))
	err = fmt.Errorf("http handler: POST %s: %s%s", target, statusText(resp), formatSnippet(snippet))
	switch {
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return nil, RetryAfter(d, err)
		}
		return nil, err
	case code >= 300 && code <= 499:
		if code < 400 {
			err = fmt.Errorf("%w (redirects are not followed: configure the final URL)", err)
		}
		return nil, Permanent(err)
	default:
		// 1xx leaking through or a status outside the HTTP range: the
		// receiver is misbehaving; try again later.
		return nil, err
	}
}

func statusText(resp *http.Response) string {
	if t := http.StatusText(resp.StatusCode); t != "" {
		return strconv.Itoa(resp.StatusCode) + " " + t
	}
	return strconv.Itoa(resp.StatusCode)
}

// formatSnippet renders the start of a response body for an error message:
// valid UTF-8, control characters and runs of whitespace as one space.
func formatSnippet(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	truncated := len(b) >= httpErrorSnippet
	if truncated {
		// Do not end on half a rune.
		for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
			if utf8.RuneStart(b[i]) {
				if !utf8.FullRune(b[i:]) {
					b = b[:i]
				}
				break
			}
		}
	}
	s := strings.Join(strings.FieldsFunc(strings.ToValidUTF8(string(b), "\uFFFD"), func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
	if s == "" {
		return ""
	}
	if truncated {
		s += "..."
	}
	return ": " + s
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date.
// It reports false for empty, unparseable, zero, negative and past values,
// and caps the delay at HTTPMaxRetryAfter.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if allDigits(v) {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(HTTPMaxRetryAfter/time.Second) {
			// Overflowing digits are still a (very long) delay.
			return HTTPMaxRetryAfter, true
		}
		d = time.Duration(secs) * time.Second
	} else {
		t, err := http.ParseTime(v)
		if err != nil {
			return 0, false
		}
		d = t.Sub(now)
	}
	if d <= 0 {
		return 0, false
	}
	return min(d, HTTPMaxRetryAfter), true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
