package console_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestAdminTokensRotateWithoutARestart: a token removed from the admin
// tokens file is refused within 5 s while another keeps working, and each
// change is logged with the token's name, never its value.
func TestAdminTokensRotateWithoutARestart(t *testing.T) {
	b := newBed(t, 1)
	file := filepath.Join(t.TempDir(), "admin-tokens")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file+".new", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
	}
	const leaked, kept = "leaked-admin-token-1", "kept-admin-token-22"
	write(leaked + " admin bob\n" + kept + " admin alice\n")
	c := b.start(t, "c", func(cfg *console.Config) {
		cfg.AdminTokens = ""
		cfg.AdminTokensFile = file
		cfg.TokensCheckEvery = 100 * time.Millisecond
	})
	if code, body := c.call(t, "PUT", "/api/v1/limits/smtp", leaked, admin.LimitState{Rate: 5}); code != 200 {
		t.Fatalf("before: %d %s", code, body)
	}
	write(kept + " admin alice\n")
	testenv.WaitFor(t, 5*time.Second, "the removed token to be refused", func() bool {
		code, _ := c.call(t, "GET", "/api/v1/whoami", leaked, nil)
		return code == 401
	})
	if code, body := c.call(t, "PUT", "/api/v1/limits/smtp", kept, admin.LimitState{Rate: 6}); code != 200 {
		t.Fatalf("the kept token: %d %s", code, body)
	}
	logs := c.logs.String()
	for _, want := range []string{"token=bob", "token=alice"} {
		if !strings.Contains(logs, want) {
			t.Errorf("no admin change logged with %s", want)
		}
	}
	for _, secret := range []string{leaked, kept} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log shows a token's value")
		}
	}
}
