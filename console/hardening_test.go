package console_test

import (
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestAdminTokensFileLeftWithoutATokenIsRefused: an admin tokens file
// emptied, left with comments only, or opened to others while the console
// runs is refused and logged; the tokens in force keep working. A later
// good content is taken.
func TestAdminTokensFileLeftWithoutATokenIsRefused(t *testing.T) {
	b := newBed(t, 1)
	file := filepath.Join(t.TempDir(), "admin-tokens")
	write := func(s string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(file+".new", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chmod(file+".new", mode)
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
	}
	const first, second = "first-admin-token-1", "second-admin-token-2"
	write(first+" admin ops\n", 0o600)
	c := b.start(t, "c", func(cfg *console.Config) {
		cfg.AdminTokens = ""
		cfg.AdminTokensFile = file
		cfg.TokensCheckEvery = 50 * time.Millisecond
	})
	for i, bad := range []struct {
		content string
		mode    os.FileMode
		want    string
	}{
		{"", 0o600, "no token left"},
		{"# all revoked\n", 0o600, "no token left"},
		{second + " admin ops\n", 0o644, "chmod 600"},
	} {
		write(bad.content, bad.mode)
		testenv.WaitFor(t, 5*time.Second, "the refusal to be logged", func() bool {
			return strings.Count(c.logs.String(), "refused") > i && strings.Contains(c.logs.String(), bad.want)
		})
		if code, body := c.call(t, "GET", "/api/v1/whoami", first, nil); code != http.StatusOK {
			t.Fatalf("after the file became %q (mode %04o): the token in force: %d %s", bad.content, bad.mode, code, body)
		}
		if code, _ := c.call(t, "GET", "/api/v1/whoami", second, nil); code != http.StatusUnauthorized {
			t.Fatalf("a token of a refused content: %d", code)
		}
	}
	write(second+" admin ops\n", 0o600)
	testenv.WaitFor(t, 5*time.Second, "the good content to be taken", func() bool {
		code, _ := c.call(t, "GET", "/api/v1/whoami", second, nil)
		return code == http.StatusOK
	})
	if strings.Contains(c.logs.String(), first) || strings.Contains(c.logs.String(), second) {
		t.Error("the log shows a token")
	}
}

// TestAdminInsecureWithTokensIsAnError: AdminInsecure beside AdminTokens
// or AdminTokensFile is an error of New naming both fields.
func TestAdminInsecureWithTokensIsAnError(t *testing.T) {
	for _, mutate := range []func(*console.Config){
		func(c *console.Config) { c.AdminTokens = adminToken + " admin" },
		func(c *console.Config) { c.AdminTokensFile = "/nonexistent/admin-tokens" },
	} {
		cfg := console.DefaultConfig()
		cfg.AdminInsecure = true
		mutate(&cfg)
		_, err := console.New(cfg, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), "Config.AdminInsecure") || !strings.Contains(err.Error(), "Config.AdminTokens") {
			t.Errorf("New: %v, want an error naming Config.AdminInsecure and Config.AdminTokens", err)
		}
	}
}

// TestAdminInsecureRefusesCrossSiteChanges: without tokens
// (AdminInsecure), what a page of another site can make a browser send is
// refused: a text/plain or form POST, a change whose Origin or
// Sec-Fetch-Site is another site's, and any request whose Host is a name
// other than localhost (DNS rebinding). The admin client's requests pass.
func TestAdminInsecureRefusesCrossSiteChanges(t *testing.T) {
	b := newBed(t, 1)
	c := b.start(t, "c", func(cfg *console.Config) { cfg.AdminTokens, cfg.AdminInsecure = "", true })
	send := func(method, path, host string, headers map[string]string) int {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+c.addr+path, strings.NewReader(`{"rate":5}`))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	_, port, _ := strings.Cut(c.addr, ":")
	for name, tc := range map[string]struct {
		method, host string
		headers      map[string]string
		want         int
	}{
		"text/plain":        {"POST", "", map[string]string{"Content-Type": "text/plain"}, 415},
		"form":              {"POST", "", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		"no content type":   {"POST", "", nil, 415},
		"other origin":      {"POST", "", map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, 403},
		"cross-site fetch":  {"POST", "", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403},
		"rebound name":      {"GET", "evil.example:" + port, nil, 403},
		"rebound change":    {"POST", "evil.example:" + port, map[string]string{"Content-Type": "application/json"}, 403},
		"the admin client":  {"POST", "", map[string]string{"Content-Type": "application/json"}, 200},
		"same origin":       {"POST", "", map[string]string{"Content-Type": "application/json", "Origin": "http://" + c.addr, "Sec-Fetch-Site": "same-origin"}, 200},
		"localhost by name": {"GET", "localhost:" + port, nil, 200},
	} {
		path := "/api/v1/rates/jobs/pause"
		if tc.method == "GET" {
			path = "/api/v1/whoami"
		}
		if got := send(tc.method, path, tc.host, tc.headers); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
	// The admin client sends Content-Type on a change without a body.
	cl := admin.Client{BaseURL: "http://" + c.addr}
	if err := cl.Do(t.Context(), "POST", "/api/v1/rates/jobs/resume", nil, nil); err != nil {
		t.Errorf("the admin client's bodyless change: %v", err)
	}
}
