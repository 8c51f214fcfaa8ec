package worker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func testJob(payload []byte) *Job {
	return &Job{ID: "01JOBID", Type: "email", Group: "g-42", Attempt: 3, MaxAttempts: 5, Payload: payload}
}

func httpCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestHTTPHandlerSuccess(t *testing.T) {
	payload := []byte("  {\"html\":\"<b>a & b</b>\",\n\t\"x\": \"\\u003c\"}  \n")
	type seen struct {
		method string
		header http.Header
		body   []byte
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.Header.Clone(), b}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true,"msg":"<&>"}`))
	}))
	defer srv.Close()

	h := &HTTPHandler{URL: srv.URL + "/send", Header: http.Header{"Authorization": {"Bearer s3cret"}}}
	res, err := h.Handle(httpCtx(t, 5*time.Second), testJob(payload))
	if err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if string(res) != `{"ok":true,"msg":"<&>"}` {
		t.Fatalf("result = %q", res)
	}
	s := <-got
	if s.method != http.MethodPost {
		t.Errorf("method = %s", s.method)
	}
	if !bytes.Equal(s.body, payload) {
		t.Errorf("body = %q, want %q", s.body, payload)
	}
	for k, want := range map[string]string{
		"Content-Type":    "application/json",
		"Authorization":   "Bearer s3cret",
		"Sluice-Job-Id":   "01JOBID",
		"Sluice-Job-Type": "email",
		"Sluice-Attempt":  "3",
		"Sluice-Group":    "g-42",
	} {
		if v := s.header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
}

func TestHTTPHandlerEmptyPayloadAndTruncation(t *testing.T) {
	big := bytes.Repeat([]byte("x"), HTTPResultLimit+1000)
	type req struct {
		n    int64
		body []byte
	}
	reqs := make(chan req, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- req{r.ContentLength, b}
		_, _ = w.Write(big)
	}))
	defer srv.Close()

	res, err := (&HTTPHandler{URL: srv.URL}).Handle(httpCtx(t, 5*time.Second), testJob(nil))
	if err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if r := <-reqs; r.n != 0 || len(r.body) != 0 {
		t.Errorf("empty payload sent ContentLength %d, body %q", r.n, r.body)
	}
	if len(res) != HTTPResultLimit {
		t.Errorf("result length = %d, want %d", len(res), HTTPResultLimit)
	}
}

func TestHTTPHandlerStatuses(t *testing.T) {
	cases := []struct {
		code      int
		permanent bool
	}{
		{200, false}, {204, false},
		{400, true}, {404, true}, {422, true},
		{408, false}, {429, false}, {500, false}, {502, false}, {503, false},
	}
	for _, c := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.code)
			_, _ = w.Write([]byte("nope: bad\n\tfield"))
		}))
		_, err := (&HTTPHandler{URL: srv.URL}).Handle(httpCtx(t, 5*time.Second), testJob([]byte(`{}`)))
		srv.Close()
		if c.code < 300 {
			if err != nil {
				t.Errorf("%d: err = %v", c.code, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%d: no error", c.code)
			continue
		}
		if IsPermanent(err) != c.permanent {
			t.Errorf("%d: IsPermanent = %v, want %v (%v)", c.code, !c.permanent, c.permanent, err)
		}
		if _, ok := RetryDelay(err); ok {
			t.Errorf("%d: RetryDelay set without Retry-After: %v", c.code, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, http.StatusText(c.code)) || !strings.Contains(msg, "nope: bad field") {
			t.Errorf("%d: message %q lacks status or body", c.code, msg)
		}
	}
}

func TestHTTPHandlerRedirectNotFollowed(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	}))
	defer srv.Close()
	_, err := (&HTTPHandler{URL: srv.URL}).Handle(httpCtx(t, 5*time.Second), testJob([]byte(`{}`)))
	if !IsPermanent(err) || hits.Load() != 1 {
		t.Fatalf("err = %v, hits = %d; want permanent after one request", err, hits.Load())
	}
}

func TestHTTPHandlerRetryAfter(t *testing.T) {
	date := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	cases := []struct {
		code     int
		value    string
		min, max time.Duration
		ok       bool
	}{
		{429, "120", 120 * time.Second, 120 * time.Second, true},
		{503, "7", 7 * time.Second, 7 * time.Second, true},
		{500, " 2 ", 2 * time.Second, 2 * time.Second, true},
		{503, date, 25 * time.Second, 31 * time.Second, true},
		{429, "86400", time.Hour, time.Hour, true},
		{429, "99999999999999999999999", time.Hour, time.Hour, true},
		{429, "-5", 0, 0, false},
		{429, "0", 0, 0, false},
		{429, "soon", 0, 0, false},
		{429, "1.5", 0, 0, false},
		{503, time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), 0, 0, false},
	}
	for _, c := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", c.value)
			w.WriteHeader(c.code)
		}))
		_, err := (&HTTPHandler{URL: srv.URL}).Handle(httpCtx(t, 5*time.Second), testJob([]byte(`{}`)))
		srv.Close()
		if err == nil || IsPermanent(err) {
			t.Errorf("%d %q: err = %v, want retryable error", c.code, c.value, err)
			continue
		}
		d, ok := RetryDelay(err)
		if ok != c.ok || (ok && (d < c.min || d > c.max)) {
			t.Errorf("%d %q: RetryDelay = %v, %v; want %v in [%v, %v]", c.code, c.value, d, ok, c.ok, c.min, c.max)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		v  string
		d  time.Duration
		ok bool
	}{
		{"", 0, false},
		{"10", 10 * time.Second, true},
		{"3600", time.Hour, true},
		{"3601", time.Hour, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-90 * time.Second).Format(http.TimeFormat), 0, false},
		{now.Add(48 * time.Hour).Format(time.RFC850), time.Hour, true},
		{"+5", 0, false},
		{"Tomorrow", 0, false},
	} {
		d, ok := parseRetryAfter(c.v, now)
		if d != c.d || ok != c.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", c.v, d, ok, c.d, c.ok)
		}
	}
}

func TestHTTPHandlerDeadline(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)

	start := time.Now()
	_, err := (&HTTPHandler{URL: srv.URL}).Handle(httpCtx(t, 150*time.Millisecond), testJob([]byte(`{}`)))
	elapsed := time.Since(start)
	if err == nil || IsPermanent(err) {
		t.Fatalf("err = %v, want retryable error", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want it to wrap context.DeadlineExceeded", err)
	}
	if elapsed > 3*time.Second {
		t.Errorf("returned after %v, want promptly after the 150ms deadline", elapsed)
	}
}

func TestHTTPHandlerConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()

	_, err = (&HTTPHandler{URL: "http://" + addr + "/x?token=s3cret"}).Handle(httpCtx(t, 5*time.Second), testJob([]byte(`{}`)))
	if err == nil || IsPermanent(err) {
		t.Fatalf("err = %v, want retryable error", err)
	}
	if _, ok := RetryDelay(err); ok {
		t.Errorf("RetryDelay set on a connection error: %v", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error leaks the query: %v", err)
	}
}

func TestHTTPHandlerBadURLPermanent(t *testing.T) {
	_, err := (&HTTPHandler{URL: "http://[::1"}).Handle(httpCtx(t, time.Second), testJob(nil))
	if !IsPermanent(err) {
		t.Fatalf("err = %v, want permanent", err)
	}
}
