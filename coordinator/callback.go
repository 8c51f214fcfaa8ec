package coordinator

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

	"github.com/sluicehq/sluice/internal/callback"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/retry"
)

// newCallbackClient is the client of every callback POST. It dials only
// what the guard lets through, the address it checked (docs/secure/callbacks.md),
// never through an HTTP proxy from the environment (the guard would check
// the proxy, not the receiver). It follows no redirect: a POST turned into
// a GET elsewhere would report success without the receiver ever seeing
// the body, and a redirect could point inside, so a 3xx is a failed
// attempt that names the Location.
func newCallbackClient(cfg Config, guard *callback.Guard) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	dial := cfg.CallbackDial
	if dial == nil {
		dial = (&net.Dialer{Timeout: min(cfg.CallbackTimeout, 30*time.Second), KeepAlive: 30 * time.Second}).DialContext
	}
	tr.DialContext = guard.DialContext(dial)
	tr.MaxIdleConnsPerHost = 8
	return &http.Client{
		Transport:     tr,
		Timeout:       cfg.CallbackTimeout,
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

// answer is what one attempt of a callback got.
type answer struct {
	status int // 0: no answer
	// retryAfter is the receiver's Retry-After on a 429 or 503 (0: none).
	retryAfter time.Duration
}

// attemptError is a failed attempt: err says all of it, for the
// coordinator's log; public is what the group's submitter reads in
// callback_error. The receiver's answer, its Location and a dial error
// name what the coordinator can reach, which a submitter must not learn
// by aiming a callback at it: public says the status class, or what kind
// of failure, only.
type attemptError struct {
	public string
	err    error
}

func (e *attemptError) Error() string { return e.err.Error() }
func (e *attemptError) Unwrap() error { return e.err }

// publicReason is what a submitter may read of a failed attempt.
func publicReason(err error) string {
	var a *attemptError
	var r *callback.RefusedError
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &a):
		return a.public
	case errors.As(err, &r):
		return r.Public()
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return "no answer from the receiver within the coordinator's callback timeout"
	}
	return "the receiver could not be reached (the coordinator's log says why)"
}

// post sends one attempt of a group's callback. It returns the answer and
// nil for a 2xx, else an error that says what went wrong, with the start
// of the answer's body, for the log (publicReason is what the submitter
// sees). A URL the guard refuses is a permanent error. The caller holds
// one of the receiver host's turns (hostSlots).
func (c *Coordinator) post(ctx context.Context, url, group string, attempt int, body Body) (answer, error) {
	if err := c.guard.CheckURL(ctx, url); err != nil {
		if callback.IsRefused(err) {
			return answer{}, permanentError{err}
		}
		return answer{}, err
	}
	open := func() io.Reader {
		if body.Size == 0 {
			return http.NoBody
		}
		return io.NewSectionReader(body.Data, 0, body.Size)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, open())
	if err != nil {
		return answer{}, permanentError{&attemptError{public: "the callback URL cannot make a request", err: fmt.Errorf("callback URL: %w", err)}}
	}
	req.ContentLength = body.Size
	req.Header.Set("Content-Type", body.ContentType)
	req.Header.Set("User-Agent", "sluice-coordinator")
	// The group is the receiver's idempotency key: delivery is at least
	// once (a coordinator that dies after the POST, before recording it,
	// leaves it to the next one to send again).
	req.Header.Set(job.HeaderGroup, group)
	req.Header.Set(job.HeaderAttempt, strconv.Itoa(attempt))
	if c.secrets != nil {
		// Read for every attempt, so that a rotation needs no restart;
		// a refused content keeps the last good secrets.
		signed := callback.Signed{Group: group, Attempt: strconv.Itoa(attempt)}
		sig, err := callback.Sign(c.secrets.Current(), c.cfg.Now(), signed, c.cfg.CallbackSignV1, open)
		if err != nil {
			return answer{}, &attemptError{public: "the coordinator could not sign the callback", err: fmt.Errorf("signing: %w", err)}
		}
		req.Header.Set(callback.HeaderSignature, sig)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if callback.IsRefused(err) {
			return answer{}, permanentError{err}
		}
		return answer{}, err
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	// Read a little more, so the connection can serve the next attempt.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	a := answer{status: resp.StatusCode}
	class := attemptResult(resp.StatusCode)
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return a, nil
	case code >= 300 && code < 400:
		return a, &attemptError{public: "the receiver answered HTTP " + class + " (a redirect, which is not followed)",
			err: fmt.Errorf("HTTP %d to %s (redirects are not followed; Location %q)", code, url, resp.Header.Get("Location"))}
	default:
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			a.retryAfter = retryAfter(resp.Header.Get("Retry-After"), c.cfg.Now())
		}
		public := "the receiver answered HTTP " + class
		msg := strings.TrimSpace(string(bytes.ToValidUTF8(head, []byte("?"))))
		if msg == "" {
			return a, &attemptError{public: public, err: fmt.Errorf("HTTP %d from %s", code, url)}
		}
		return a, &attemptError{public: public, err: fmt.Errorf("HTTP %d from %s: %s", code, url, msg)}
	}
}

// hostSlots bounds the callback POSTs in flight per receiver host, across
// the queue partitions' watchers: a slow receiver holds its host's slots,
// not the partitions'.
type hostSlots struct {
	n     int
	mu    sync.Mutex
	hosts map[string]*hostSlot
}

type hostSlot struct {
	ch    chan struct{}
	users int // holders and waiters: the entry goes with the last
}

func newHostSlots(n int) *hostSlots { return &hostSlots{n: n, hosts: map[string]*hostSlot{}} }

// acquire waits for a slot of host (or ctx); release gives it back. busy,
// if not nil, is called once before waiting when none is free: the
// caller gives back what it must not hold while it waits.
func (h *hostSlots) acquire(ctx context.Context, host string, busy func()) (release func(), err error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	h.mu.Lock()
	s := h.hosts[host]
	if s == nil {
		s = &hostSlot{ch: make(chan struct{}, h.n)}
		h.hosts[host] = s
	}
	s.users++
	h.mu.Unlock()
	done := func() {
		h.mu.Lock()
		if s.users--; s.users == 0 {
			delete(h.hosts, host)
		}
		h.mu.Unlock()
	}
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch; done() }, nil
	default:
	}
	if busy != nil {
		busy()
	}
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}

// urlHost is the host a callback URL names ("" when it names none: the
// POST then fails on its own).
func urlHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// retryAfter reads a Retry-After value: seconds, or an HTTP date. 0 when
// absent, past or unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(n)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// nextDelay is the wait after the n-th failed attempt: the backoff, or the
// receiver's Retry-After when longer, never beyond CallbackMaxBackoff.
func (c *Coordinator) nextDelay(n int, a answer) time.Duration {
	return max(c.backoff(n), min(a.retryAfter, c.cfg.CallbackMaxBackoff))
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
