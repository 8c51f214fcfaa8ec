// Package admin holds the admin API's contract (docs/admin.md): bearer-token
// authentication with roles, the JSON wire types, and the Go client the
// `sluice` admin commands use. The console (console/) serves the API.
package admin

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/secretfile"
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
	name string // logged for each use, never the token
}

// parseTokens reads "<token> <role> [<name>]" entries separated by ';' or
// new lines; blank entries and lines starting with '#' are skipped. It
// returns the hashes only, each named by its name, else by source and
// its entry number.
func parseTokens(s, source string) ([]tokenHash, error) {
	var out []tokenHash
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == '\n' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 && len(f) != 3 {
			// The entry holds a token: never echo it in the error.
			return nil, fmt.Errorf("token entry %d: want \"<token> <role> [<name>]\" (role read or admin)", len(out)+1)
		}
		name := fmt.Sprintf("%s#%d", source, len(out)+1)
		if len(f) == 3 {
			name = f[2]
		}
		role, err := ParseRole(f[1])
		if err != nil {
			return nil, fmt.Errorf("token entry %d: %v", len(out)+1, err)
		}
		if len(f[0]) < MinTokenLen {
			return nil, fmt.Errorf("token entry %d: the token is %d characters, want at least %d, as the gate's (`openssl rand -hex 16` makes one)", len(out)+1, len(f[0]), MinTokenLen)
		}
		out = append(out, tokenHash{sum: sha256.Sum256([]byte(f[0])), role: role, name: name})
	}
	return out, nil
}

// MinTokenLen is the shortest admin token: 16 characters, as the gate's.
const MinTokenLen = 16

// Tokens are bearer tokens with their roles, kept as their SHA-256 hashes
// only (ParseTokens, ReadTokens).
type Tokens struct{ hashes []tokenHash }

// Len is how many tokens there are.
func (t Tokens) Len() int { return len(t.hashes) }

// ParseTokens reads "<token> <role> [<name>]" entries (role read or
// admin) separated by ';' or new lines; blank entries and lines starting
// with '#' are skipped. The name is what the logs show of the token's
// uses (default "inline#<entry number>"). Its errors name the entry by its
// number, never the token.
func ParseTokens(s string) (Tokens, error) {
	h, err := parseTokens(s, "inline")
	return Tokens{h}, err
}

// ReadTokens reads a file of tokens, one "<token> <role> [<name>]" per
// line, as ParseTokens does (default name "<path>#<entry number>"); "" is
// no file and no tokens. The file must be readable by its owner only
// (internal/secretfile).
func ReadTokens(path string) (Tokens, error) {
	if path == "" {
		return Tokens{}, nil
	}
	raw, err := secretfile.Read(path)
	if err != nil {
		return Tokens{}, err
	}
	var b strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return Tokens{}, fmt.Errorf("%s: %w", path, err)
	}
	h, err := parseTokens(b.String(), path)
	t := Tokens{h}
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

// Caller is who a request comes from: its token's role and name.
type Caller struct {
	Role Role
	// Name is the token's name ("" without tokens): logs show it, never
	// the token.
	Name string
}

// Check authenticates r and authorizes its method; see Identify.
func (a *Auth) Check(r *http.Request) (Role, *Error) {
	c, err := a.Identify(r)
	return c.Role, err
}

// Identify authenticates r and authorizes its method. It returns the
// caller, or the error to answer. Its fixes name no server setting: the
// server knows how its tokens are configured, and adds that to a 403 for
// no tokens at all (Configured false), or to an unknown token's 401.
func (a *Auth) Identify(r *http.Request) (Caller, *Error) {
	if !a.Configured() {
		if a.insecure {
			return Caller{Role: RoleAdmin, Name: "insecure"}, nil
		}
		return Caller{}, &Error{Status: http.StatusForbidden, Message: "the admin API has no tokens configured",
			Fix: "give the server admin tokens, \"<token> admin;<token> read\" (docs/admin.md)"}
	}
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return Caller{}, &Error{Status: http.StatusUnauthorized, Message: "no bearer token",
			Fix: "send Authorization: Bearer <token> (sluice: --admin-token, --admin-token-file or SLUICE_ADMIN_TOKEN)"}
	}
	c := a.lookup(strings.TrimSpace(tok))
	if c.Role == RoleNone {
		return Caller{}, &Error{Status: http.StatusUnauthorized, Message: "unknown token",
			Fix: "use one of the server's admin tokens"}
	}
	if c.Role < RoleAdmin && r.Method != http.MethodGet && r.Method != http.MethodHead {
		return c, &Error{Status: http.StatusForbidden, Message: "this token's role is read: " + r.Method + " needs admin",
			Fix: "use a token with the admin role"}
	}
	return c, nil
}

// lookup compares the token's hash with every configured one in constant
// time, all of them every time, so the answer's timing tells nothing of
// which (or whether one) matched.
func (a *Auth) lookup(tok string) Caller {
	sum := sha256.Sum256([]byte(tok))
	var c Caller
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 && t.role > c.Role {
			c = Caller{Role: t.role, Name: t.name}
		}
	}
	return c
}
