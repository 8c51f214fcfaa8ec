// Package admin holds the admin API's contract (docs/admin.md): bearer-token
// authentication with roles, the JSON wire types, and the Go client the
// `sluice` admin commands use. The coordinator serves the API.
package admin

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Role is what a token may do.
type Role int

const (
	RoleNone  Role = iota
	RoleRead       // GET only
	RoleAdmin      // everything
)

func (r Role) String() string {
	switch r {
	case RoleRead:
		return "read"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// ParseRole reads "read" or "admin".
func ParseRole(s string) (Role, error) {
	switch strings.TrimSpace(s) {
	case "read":
		return RoleRead, nil
	case "admin":
		return RoleAdmin, nil
	}
	return RoleNone, fmt.Errorf("role %q: want read or admin", s)
}

// Auth checks bearer tokens. It keeps only their SHA-256 hashes: a heap
// dump or a debug print does not leak a usable token.
type Auth struct {
	tokens   []tokenHash
	insecure bool
}

type tokenHash struct {
	sum  [sha256.Size]byte
	role Role
}

// parseTokens reads "<token> <role>" entries separated by ';' or new
// lines; blank entries and lines starting with '#' are skipped. It
// returns the hashes only.
func parseTokens(s string) ([]tokenHash, error) {
	var out []tokenHash
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == '\n' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			// The entry holds a token: never echo it in the error.
			return nil, fmt.Errorf("admin token entry %d: want \"<token> <role>\" (role read or admin)", len(out)+1)
		}
		role, err := ParseRole(f[1])
		if err != nil {
			return nil, fmt.Errorf("admin token entry %d: %v", len(out)+1, err)
		}
		if len(f[0]) < 8 {
			return nil, fmt.Errorf("admin token entry %d: the token is shorter than 8 characters", len(out)+1)
		}
		out = append(out, tokenHash{sum: sha256.Sum256([]byte(f[0])), role: role})
	}
	return out, nil
}

// NewAuth builds the checker from the inline tokens (--admin-tokens) and a
// file of them (--admin-tokens-file, "" for none). insecure
// (--admin-insecure) lets every request in as admin when no token is
// configured: for sluice dev on localhost.
func NewAuth(inline, file string, insecure bool) (*Auth, error) {
	a := &Auth{insecure: insecure}
	t, err := parseTokens(inline)
	if err != nil {
		return nil, fmt.Errorf("--admin-tokens: %w", err)
	}
	a.tokens = t
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--admin-tokens-file: %w", err)
		}
		defer f.Close()
		var b strings.Builder
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			b.WriteString(sc.Text())
			b.WriteByte('\n')
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("--admin-tokens-file %s: %w", file, err)
		}
		t, err := parseTokens(b.String())
		if err != nil {
			return nil, fmt.Errorf("--admin-tokens-file %s: %w", file, err)
		}
		a.tokens = append(a.tokens, t...)
	}
	return a, nil
}

// Configured reports whether any token is configured.
func (a *Auth) Configured() bool { return len(a.tokens) > 0 }

// Insecure reports whether requests go in without a token.
func (a *Auth) Insecure() bool { return !a.Configured() && a.insecure }

// Check authenticates r and authorizes its method. It returns the role,
// or the error to answer.
func (a *Auth) Check(r *http.Request) (Role, *Error) {
	if !a.Configured() {
		if a.insecure {
			return RoleAdmin, nil
		}
		return RoleNone, &Error{Status: http.StatusForbidden, Message: "the admin API has no tokens configured",
			Fix: "start the coordinator with --admin-tokens \"<token> admin;<token> read\" or --admin-tokens-file (or --admin-insecure, on localhost only)"}
	}
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return RoleNone, &Error{Status: http.StatusUnauthorized, Message: "no bearer token",
			Fix: "send Authorization: Bearer <token> (sluice: --admin-token, --admin-token-file or SLUICE_ADMIN_TOKEN)"}
	}
	role := a.lookup(strings.TrimSpace(tok))
	if role == RoleNone {
		return RoleNone, &Error{Status: http.StatusUnauthorized, Message: "unknown token",
			Fix: "use a token listed in the coordinator's --admin-tokens or --admin-tokens-file"}
	}
	if role < RoleAdmin && r.Method != http.MethodGet && r.Method != http.MethodHead {
		return role, &Error{Status: http.StatusForbidden, Message: "this token's role is read: " + r.Method + " needs admin",
			Fix: "use a token with the admin role"}
	}
	return role, nil
}

// lookup compares the token's hash with every configured one in constant
// time, all of them every time, so the answer's timing tells nothing of
// which (or whether one) matched.
func (a *Auth) lookup(tok string) Role {
	sum := sha256.Sum256([]byte(tok))
	role := RoleNone
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 && t.role > role {
			role = t.role
		}
	}
	return role
}
