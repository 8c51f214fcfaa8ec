// Package dashboard is the operator's web page, served at "/" by the console
// (package console: sluice console, or the console in sluice coordinator):
// static HTML, CSS and JavaScript embedded in the binary (no build step,
// nothing fetched from elsewhere) that polls the admin API under /api/v1/
// (docs/admin.md) with the operator's bearer token. docs/dashboard.md says
// what each panel shows.
package dashboard

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// csp allows only this origin: the page loads its script and style from the
// console and talks only to its API. No inline script or style, so data
// that slipped through as markup could not run. frame-ancestors keeps the
// page (and its replay and purge buttons) out of other sites' frames.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the dashboard's files. Mount it at "/" on the console's
// listener, beside /api/v1/ and /metrics, which it does not serve.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	etags, err := contentTags(sub)
	if err != nil {
		panic(err)
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		// The files change only with the binary, but their names carry no
		// version: the browser revalidates every time (no-cache) rather
		// than run an old script against a newer API after an upgrade, and
		// the content's hash as ETag makes that a 304 without a body
		// (embedded files have no modification time for Last-Modified).
		h.Set("Cache-Control", "no-cache")
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name == "" {
			name = "index.html"
		}
		if tag, ok := etags[name]; ok {
			h.Set("ETag", tag) // http.ServeContent answers If-None-Match with it
		}
		files.ServeHTTP(w, r)
	})
}

// contentTags is a strong ETag per file: the start of its SHA-256.
func contentTags(fsys fs.FS) (map[string]string, error) {
	tags := map[string]string{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		tags[p] = `"` + hex.EncodeToString(sum[:12]) + `"`
		return nil
	})
	return tags, err
}
