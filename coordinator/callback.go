package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/retry"
)

// newCallbackClient is the client of every callback POST. It follows no
// redirect: a POST turned into a GET elsewhere would report success
// without the receiver ever seeing the body, so a 3xx is a failed attempt
// that names the Location.
func newCallbackClient(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: min(timeout, 30*time.Second), KeepAlive: 30 * time.Second}).DialContext
	tr.MaxIdleConnsPerHost = 8
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// permanentError is a callback failure no retry can fix (the URL cannot
// make a request).
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// attemptResult is the result label of an attempt: the status class, or
// "error" when no answer came.
func attemptResult(status int) string {
	if status == 0 {
		return "error"
	}
	return strconv.Itoa(status/100) + "xx"
}

// post sends one attempt of a group's callback. It returns the answer's
// status (0 when none came) and nil for a 2xx, else an error that says what
// went wrong, with the start of the answer's body.
func (c *Coordinator) post(ctx context.Context, url, group string, attempt int, body Body) (int, error) {
	var rd io.Reader = http.NoBody
	if body.Size > 0 {
		rd = io.NewSectionReader(body.Data, 0, body.Size)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, rd)
	if err != nil {
		return 0, permanentError{fmt.Errorf("callback URL: %w", err)}
	}
	req.ContentLength = body.Size
	req.Header.Set("Content-Type", body.ContentType)
	req.Header.Set("User-Agent", "sluice-coordinator")
	// The group is the receiver's idempotency key: delivery is at least
	// once (a coordinator that dies after the POST, before recording it,
	// leaves it to the next one to send again).
	req.Header.Set(job.HeaderGroup, group)
	req.Header.Set(job.HeaderAttempt, strconv.Itoa(attempt))
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	// Read a little more, so the connection can serve the next attempt.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return code, nil
	case code >= 300 && code < 400:
		return code, fmt.Errorf("HTTP %d to %s (redirects are not followed; Location %q)", code, url, resp.Header.Get("Location"))
	default:
		msg := strings.TrimSpace(string(bytes.ToValidUTF8(head, []byte("?"))))
		if msg == "" {
			return code, fmt.Errorf("HTTP %d from %s", code, url)
		}
		return code, fmt.Errorf("HTTP %d from %s: %s", code, url, msg)
	}
}

// backoff is the wait after the n-th failed attempt: CallbackBackoff
// doubled per attempt, at most CallbackMaxBackoff, with ±20% jitter so that
// groups failing together do not retry in step.
func (c *Coordinator) backoff(n int) time.Duration {
	return retry.Backoff(c.cfg.CallbackBackoff, c.cfg.CallbackMaxBackoff, n)
}

func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}
