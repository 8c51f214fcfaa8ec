// Package dashboard is the operator's web page, served by the coordinator at
// "/": static HTML, CSS and JavaScript embedded in the binary (no build step,
// nothing fetched from elsewhere) that polls the admin API under /api/v1/
// (docs/admin.md) with the operator's bearer token. docs/dashboard.md says
// what each panel shows.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// csp allows only this origin: the page loads its script and style from the
// coordinator and talks only to its API. No inline script or style, so data
// that slipped through as markup could not run. frame-ancestors keeps the
// page (and its replay and purge buttons) out of other sites' frames.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the dashboard's files. Mount it at "/" on the coordinator's
// listener, beside /api/v1/ and /metrics, which it does not serve.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
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
		// The files are embedded, so they change only with the binary; but
		// they carry no version in their names, so the browser revalidates
		// each time (a cheap 304 on If-Modified-Since is not available for
		// embed.FS, whose files have no time) rather than running an old
		// script against a newer API after an upgrade.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
