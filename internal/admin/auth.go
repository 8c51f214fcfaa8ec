// Package admin holds the admin API's contract (docs/admin.md): bearer-token
// authentication with roles, the JSON wire types, and the Go client the
// `sluice` admin commands use. The console (console/) serves the API.
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
			return nil, fmt.Errorf("token entry %d: want \"<token> <role>\" (role read or admin)", len(out)+1)
		}
		role, err := ParseRole(f[1])
		if err != nil {
			return nil, fmt.Errorf("token entry %d: %v", len(out)+1, err)
		}
		if len(f[0]) < 8 {
			return nil, fmt.Errorf("token entry %d: the token is shorter than 8 characters", len(out)+1)
		}
		out = append(out, tokenHash{sum: sha256.Sum256([]byte(f[0])), role: role})
	}
	return out, nil
}

// Tokens are bearer tokens with their roles, kept as their SHA-256 hashes
// only (ParseTokens, ReadTokens).
type Tokens struct{ hashes []tokenHash }

// Len is how many tokens there are.
func (t Tokens) Len() int { return len(t.hashes) }

// ParseTokens reads "<token> <role>" entries (role read or admin)
// separated by ';' or new lines; blank entries and lines starting with '#'
// are skipped. Its errors name the entry by its number, never the token.
func ParseTokens(s string) (Tokens, error) {
	h, err := parseTokens(s)
	return Tokens{h}, err
}

// ReadTokens reads a file of tokens, one "<token> <role>" per line, as
// ParseTokens does; "" is no file and no tokens.
func ReadTokens(path string) (Tokens, error) {
	if path == "" {
		return Tokens{}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return Tokens{}, err
	}
	defer f.Close()
	var b strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return Tokens{}, fmt.Errorf("%s: %w", path, err)
	}
	t, err := ParseTokens(b.String())
	if err != nil {
		return Tokens{}, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// NewAuth builds the checker from sets of tokens (inline, from a file...).
// insecure lets every request in as admin when no token is configured:
// for sluice dev on localhost.
func NewAuth(insecure bool, tokens ...Tokens) *Auth {
	a := &Auth{insecure: insecure}
	for _, t := range tokens {
		a.tokens = append(a.tokens, t.hashes...)
	}
	return a
}

// Configured reports whether any token is configured.
func (a *Auth) Configured() bool { return len(a.tokens) > 0 }

// Insecure reports whether requests go in without a token.
func (a *Auth) Insecure() bool { return !a.Configured() && a.insecure }

// Check authenticates r and authorizes its method. It returns the role,
// or the error to answer. Its fixes name no server setting: the server
// knows how its tokens are configured, and adds that to a 403 for no
// tokens at all (Configured false), or to an unknown token's 401.
func (a *Auth) Check(r *http.Request) (Role, *Error) {
	if !a.Configured() {
		if a.insecure {
			return RoleAdmin, nil
		}
		return RoleNone, &Error{Status: http.StatusForbidden, Message: "the admin API has no tokens configured",
			Fix: "give the server admin tokens, \"<token> admin;<token> read\" (docs/admin.md)"}
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
			Fix: "use one of the server's admin tokens"}
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
