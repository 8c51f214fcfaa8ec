package cli

import "net/url"

// RedactURL renders a URL for messages and logs without its user info,
// query and fragment (each may carry a credential): the worker's http
// handlers log their targets, and sluice worker --http-handlers names a
// bad one.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "..."
	}
	u.Fragment = ""
	return u.String()
}
