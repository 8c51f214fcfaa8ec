package dashboard

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func TestHandlerServesThePageWithItsHeaders(t *testing.T) {
	h := Handler()
	for _, c := range []struct{ path, ctype, contains string }{
		{"/", "text/html", `<script src="app.js" defer></script>`},
		{"/app.js", "javascript", "function renderPartitions"},
		{"/style.css", "text/css", "prefers-color-scheme: dark"},
	} {
		resp := get(t, h, http.MethodGet, c.path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", c.path, resp.StatusCode)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, c.ctype) {
			t.Errorf("GET %s: Content-Type %q, want %s", c.path, ct, c.ctype)
		}
		if !strings.Contains(string(body), c.contains) {
			t.Errorf("GET %s lacks %q", c.path, c.contains)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: CSP %q lacks %q", c.path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "*") {
			t.Errorf("GET %s: CSP %q allows more than this origin", c.path, csp)
		}
		if resp.Header.Get("Cache-Control") != "no-cache" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v", c.path, resp.Header)
		}
	}
	// Revalidation: the ETag of the content answers a 304 without a body.
	for _, p := range []string{"/", "/app.js"} {
		first := get(t, h, http.MethodGet, p)
		tag := first.Header.Get("ETag")
		if len(tag) < 10 {
			t.Fatalf("GET %s: ETag %q", p, tag)
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, p, nil)
		req.Header.Set("If-None-Match", tag)
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
			t.Errorf("GET %s with If-None-Match %s: %d, %d bytes; want 304 and none", p, tag, rec.Code, rec.Body.Len())
		}
	}
	if a, b := get(t, h, http.MethodGet, "/").Header.Get("ETag"), get(t, h, http.MethodGet, "/app.js").Header.Get("ETag"); a == b {
		t.Errorf("index.html and app.js share the ETag %s", a)
	}
	if resp := get(t, h, http.MethodGet, "/nope.js"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nope.js: %d, want 404", resp.StatusCode)
	}
	if resp := get(t, h, http.MethodPost, "/"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", resp.StatusCode)
	}
}

// The page's promises, checked in its source: nothing loaded from another
// origin (the CSP would block it, and the page would break silently), no
// inline script or style (same), and data never written as markup.
func TestStaticFilesKeepTheRules(t *testing.T) {
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?https?:`)
	inline := regexp.MustCompile(`(?i)<script>|<script[^>]*>[^<]|<style|\sstyle=|\son[a-z]+=`)
	markup := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function`)
	err := fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(path)
		if err != nil {
			return err
		}
		s := string(b)
		if m := external.FindString(s); m != "" {
			t.Errorf("%s loads from another origin: %q", path, m)
		}
		if strings.HasSuffix(path, ".html") {
			if m := inline.FindString(s); m != "" {
				t.Errorf("%s has inline script or style, which the CSP blocks: %q", path, m)
			}
		}
		if strings.HasSuffix(path, ".js") {
			if m := markup.FindString(s); m != "" {
				t.Errorf("%s writes markup or evaluates strings: %q", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
