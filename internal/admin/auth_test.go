package admin

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAuthRoles(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# operators\nfile-admin-token admin\n\nfile-read-token-1 read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inline, err := ParseTokens("inline-admin-token-1 admin; inline-read-token-1 read")
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := ReadTokens(file)
	if err != nil || fromFile.Len() != 2 {
		t.Fatal(fromFile.Len(), err)
	}
	a := NewAuth(false, inline, fromFile)
	for _, tc := range []struct {
		method, header string
		role           Role
		status         int
	}{
		{"GET", "", RoleNone, 401},
		{"GET", "Bearer ", RoleNone, 401},
		{"GET", "Basic aW5saW5lLWFkbWluLTE=", RoleNone, 401},
		{"GET", "Bearer nope-nope-nope", RoleNone, 401},
		{"GET", "Bearer inline-read-token-1", RoleRead, 0},
		{"HEAD", "Bearer file-read-token-1", RoleRead, 0},
		{"POST", "Bearer inline-read-token-1", RoleRead, 403},
		{"DELETE", "Bearer file-read-token-1", RoleRead, 403},
		{"POST", "Bearer inline-admin-token-1", RoleAdmin, 0},
		{"PUT", "Bearer file-admin-token", RoleAdmin, 0},
	} {
		r := httptest.NewRequest(tc.method, "/api/v1/x", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		role, e := a.Check(r)
		status := 0
		if e != nil {
			status = e.Status
			if e.Fix == "" {
				t.Errorf("%s %q: an error without a fix: %v", tc.method, tc.header, e)
			}
		}
		if role != tc.role || status != tc.status {
			t.Errorf("%s %q: role %v status %d, want %v %d", tc.method, tc.header, role, status, tc.role, tc.status)
		}
	}
	none := NewAuth(false)
	if _, e := none.Check(httptest.NewRequest("GET", "/", nil)); e == nil || e.Status != 403 || none.Configured() || e.Fix == "" {
		t.Errorf("no tokens: %v", e)
	}
	open := NewAuth(true)
	if role, e := open.Check(httptest.NewRequest("POST", "/", nil)); e != nil || role != RoleAdmin || !open.Insecure() {
		t.Errorf("insecure: %v %v", role, e)
	}
	// Tokens configured: --admin-insecure does not open the door.
	admin1, _ := ParseTokens("inline-admin-token-1 admin")
	both := NewAuth(true, admin1)
	if _, e := both.Check(httptest.NewRequest("GET", "/", nil)); e == nil || e.Status != 401 || both.Insecure() {
		t.Errorf("tokens and insecure: %v", e)
	}
}

// TestTokensErrorsNameNoSetting: the errors of a library name the entry
// or the file, never a flag or a Config field: the server adds which of
// its settings held it.
func TestTokensErrorsNameNoSetting(t *testing.T) {
	if _, err := ParseTokens("ok-token-1-long-enough admin; bad"); err == nil || !strings.HasPrefix(err.Error(), "token entry 2:") {
		t.Errorf("a bad second entry: %v", err)
	}
	file := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(file, []byte("ok-token-1-long-enough root\n"), 0o600)
	if _, err := ReadTokens(file); err == nil || !strings.HasPrefix(err.Error(), file+": token entry 1:") {
		t.Errorf("a bad file: %v", err)
	}
	if _, err := ReadTokens(file + ".missing"); err == nil || strings.Contains(err.Error(), "--") {
		t.Errorf("a missing file: %v", err)
	}
	if tok, err := ReadTokens(""); err != nil || tok.Len() != 0 {
		t.Errorf("no file: %d %v", tok.Len(), err)
	}
}

func TestParseTokensNeverEchoesATokenInErrors(t *testing.T) {
	for _, bad := range []string{"secret-token-1", "secret-token-1 root", "secret-token-1 admin name extra", "short admin"} {
		_, err := parseTokens(bad, "test")
		if err == nil {
			t.Errorf("parseTokens(%q) accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "secret-token-1") || strings.Contains(err.Error(), "short") && !strings.Contains(err.Error(), "shorter") {
			t.Errorf("parseTokens(%q): the error shows the token: %v", bad, err)
		}
	}
}

// FuzzParseTokens: whatever the flag or file holds, parsing never panics,
// and an accepted entry's token authenticates with its role.
func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{"tok1tok1tok1tok1 admin;tok2tok2tok2tok2 read", "# c\nabcdefghabcdefgh read\n", ";;", "x y z", "abcdefghabcdefgh\tadmin"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hashes, err := parseTokens(s, "fuzz")
		if err != nil {
			return
		}
		a := &Auth{tokens: hashes}
		for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == '\n' }) {
			f := strings.Fields(line)
			if (len(f) != 2 && len(f) != 3) || strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			want, _ := ParseRole(f[1])
			if got := a.lookup(f[0]).Role; got < want {
				t.Fatalf("token %q: role %v, want at least %v", f[0], got, want)
			}
		}
	})
}

// TestEachTokenHasAName: the name a token's uses are logged by, its own
// or its entry's.
func TestEachTokenHasAName(t *testing.T) {
	tok, err := ParseTokens("token-of-ops-team-1 admin alice;token-of-ci-jobs-12 read")
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuth(false, tok)
	for token, want := range map[string]Caller{
		"token-of-ops-team-1": {RoleAdmin, "alice"},
		"token-of-ci-jobs-12": {RoleRead, "inline#2"},
		"someone-else-1":      {},
	} {
		if got := a.lookup(token); got != want {
			t.Errorf("%s: %+v, want %+v", token, got, want)
		}
	}
}

// TestAdminTokensNeedSixteenCharacters: an admin token is as long as a
// gate token at least (16 characters); the error says how long it is and
// how to make one, never the token.
func TestAdminTokensNeedSixteenCharacters(t *testing.T) {
	for _, tok := range []string{"abcdefgh", "abcdefghijklmno"} { // 8 and 15
		_, err := ParseTokens(tok + " admin")
		if err == nil || !strings.Contains(err.Error(), "want at least 16") || strings.Contains(err.Error(), tok) {
			t.Errorf("a %d-character token: %v", len(tok), err)
		}
	}
	if _, err := ParseTokens("abcdefghijklmnop admin"); err != nil {
		t.Errorf("a 16-character token: %v", err)
	}
}

// TestATokensFileOthersCanReadIsRefused: a tokens file the process's user
// owns must be readable by that user only; the error names the file and
// the chmod that fixes it.
func TestATokensFileOthersCanReadIsRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("file-admin-token admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(file, 0o644)
	if _, err := ReadTokens(file); err == nil || !strings.Contains(err.Error(), "chmod 600 "+file) {
		t.Errorf("a 0644 tokens file: %v", err)
	}
	os.Chmod(file, 0o600)
	if _, err := ReadTokens(file); err != nil {
		t.Errorf("a 0600 tokens file: %v", err)
	}
}
