package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// DefaultURL is the admin API as sluice dev runs it: the console on the
// coordinator's listener.
const DefaultURL = "http://127.0.0.1:8083"

// Client calls the admin API.
type Client struct {
	// BaseURL is the console's: sluice console's, or sluice coordinator's,
	// e.g. http://127.0.0.1:8083.
	BaseURL string
	// Token is sent as a bearer token; empty: none.
	Token string
	// HTTP is the client; nil: one with a 30 s timeout.
	HTTP *http.Client
}

// UnreachableError means no HTTP answer came from the console.
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the admin API at %s (%v).\n"+
		"  Is `sluice coordinator` (which serves the console unless --console=false), `sluice console` or `sluice dev` running there?"+
		" Point --admin-url / SLUICE_ADMIN_URL at its --listen address.", e.URL, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Do sends method path (under BaseURL, e.g. "/api/v1/rates/jobs") with in
// as its JSON body (nil: none) and decodes the answer into out (nil:
// discarded). An error answer is an *Error with its status; no answer, an
// *UnreachableError.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	base := strings.TrimRight(c.BaseURL, "/")
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return fmt.Errorf("--admin-url %q: %w", c.BaseURL, err)
	}
	if in != nil || method != http.MethodGet && method != http.MethodHead {
		// Even without a body: the console refuses a change without
		// it when no token is sent (--admin-insecure), as a page of
		// another site could send one.
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("the admin API at %s did not answer in time: %w", base, ctx.Err())
		}
		return &UnreachableError{URL: base, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return &UnreachableError{URL: base, Err: err}
	}
	if resp.StatusCode >= 300 {
		e := &Error{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Message == "" {
			// Not the admin API answering: an old coordinator, a proxy.
			e.Message = fmt.Sprintf("%s %s answered %s: %s", method, base+path, resp.Status, excerpt(data))
			if resp.StatusCode == http.StatusNotFound {
				e.Fix = "is --admin-url a console: sluice console, or sluice coordinator without --console=false?"
			}
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not what the admin API sends: %v", method, base+path, err)
	}
	return nil
}

// Get is Do with GET and no body.
func (c *Client) Get(ctx context.Context, path string, out any) error {
	return c.Do(ctx, http.MethodGet, path, nil, out)
}

// StatusOf is err's HTTP status when it is an API error answer, else 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

func excerpt(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
