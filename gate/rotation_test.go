package gate_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestATokenRemovedFromItsFileIsRefusedWithoutARestart: the tokens file
// is followed: a token taken out is refused within 5 s while the other
// keeps working, and a new one works at once too.
func TestATokenRemovedFromItsFileIsRefusedWithoutARestart(t *testing.T) {
	k := newKafka(t)
	file := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		t.Helper()
		// As an operator's tool does: a new file renamed over the old.
		tmp := file + ".new"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("leaked-token-0123456789 * ci\nkept-token-0123456789 jobs ops\n")
	g := startGate(t, k, func(c *gate.Config) {
		c.AllowNoAuth = false
		c.TokensFile = file
		c.TokensCheckEvery = 100 * time.Millisecond
	})
	status := func(token string) int {
		return post(t, g.url+"/v1/topics/jobs/jobs", `{"type":"t","payload":{}}`, "Authorization", "Bearer "+token).status
	}
	if s := status("leaked-token-0123456789"); s != http.StatusAccepted {
		t.Fatalf("before: %d", s)
	}
	write("kept-token-0123456789 jobs ops\nnew-token-0123456789 jobs ci-2\n")
	removed := time.Now()
	testenv.WaitFor(t, 5*time.Second, "the removed token to be refused", func() bool { return status("leaked-token-0123456789") == http.StatusUnauthorized })
	t.Logf("refused %s after the file changed", time.Since(removed).Round(time.Millisecond))
	for _, tok := range []string{"kept-token-0123456789", "new-token-0123456789"} {
		if s := status(tok); s != http.StatusAccepted {
			t.Errorf("%s: %d", tok, s)
		}
	}
	// A file left with no token is refused: logged, and the tokens in
	// force stay (a gate without --allow-no-auth must not open up).
	write("# nobody\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP) // a reload asked at once, as an operator may
	testenv.WaitFor(t, 5*time.Second, "the empty file to be refused", func() bool {
		return strings.Contains(g.logs.String(), "no token left")
	})
	if s := status("someone-else-0123456789"); s != http.StatusUnauthorized {
		t.Errorf("an unknown token after the empty file: %d", s)
	}
	if s := status("kept-token-0123456789"); s != http.StatusAccepted {
		t.Errorf("the token kept through it all: %d", s)
	}
}

// TestAnEmptiedTokensFileDoesNotTurnAuthenticationOff: a gate run with
// --allow-no-auth and a tokens file that had tokens refuses the file left
// with none: authentication stays on with the tokens in force (before,
// the gate took the empty file and let anyone in).
func TestAnEmptiedTokensFileDoesNotTurnAuthenticationOff(t *testing.T) {
	k := newKafka(t)
	file := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		t.Helper()
		tmp := file + ".new"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("kept-token-0123456789 jobs ops\n")
	g := startGate(t, k, func(c *gate.Config) {
		c.AllowNoAuth = true
		c.TokensFile = file
		c.TokensCheckEvery = 50 * time.Millisecond
	})
	status := func(token string) int {
		return post(t, g.url+"/v1/topics/jobs/jobs", `{"type":"t","payload":{}}`, "Authorization", "Bearer "+token).status
	}
	if s := status("kept-token-0123456789"); s != http.StatusAccepted {
		t.Fatalf("before: %d", s)
	}
	write("")
	testenv.WaitFor(t, 5*time.Second, "the empty file to be refused", func() bool {
		return strings.Contains(g.logs.String(), "would turn authentication off")
	})
	if s := status("anyone-at-all-0123456789"); s != http.StatusUnauthorized {
		t.Errorf("an unknown token after the empty file: %d, want 401", s)
	}
	if s := status("kept-token-0123456789"); s != http.StatusAccepted {
		t.Errorf("the token in force: %d", s)
	}
}
