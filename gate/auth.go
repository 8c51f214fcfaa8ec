package gate

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/secretfile"
)

// Auth maps bearer tokens to the topics they may write. A token is kept only
// as its SHA-256, so looking one up compares hashes, not secrets, and takes
// the same time whatever the token.
type Auth struct {
	scopes map[[32]byte]scope
}

type scope struct {
	name   string // shown in logs instead of the token
	all    bool
	topics map[string]bool
	// canary: the token may send heartbeat canaries (groups and types
	// starting with "sluice."), given as +canary in its topic list.
	canary bool
}

// Allows reports whether the scope may write topic.
func (s scope) Allows(topic string) bool { return s.all || s.topics[topic] }

// ParseTokens reads token definitions, one per line or separated by ';':
//
//	<token> <topic>[,<topic>...] [<name>]   # or * for every topic
//
// The name is what logs show of the token (default "<source>:<line>").
// A "+canary" entry in the list lets the token send heartbeat canaries
// (the canary monitor's token: "<token> *,+canary").
//
// Also accepted: <token>=<topics> and <token>:<topics>. Blank lines and lines
// starting with # are ignored.
func ParseTokens(r io.Reader, source string) (*Auth, error) {
	a := &Auth{scopes: map[[32]byte]scope{}}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		for _, def := range strings.Split(sc.Text(), ";") {
			def = strings.TrimSpace(def)
			if def == "" || strings.HasPrefix(def, "#") {
				continue
			}
			tok, topics, ok := cutAny(def, " \t=:")
			tok, topics = strings.TrimSpace(tok), strings.TrimSpace(topics)
			if !ok || tok == "" || topics == "" {
				return nil, fmt.Errorf("%s line %d: want \"<token> <topic>[,<topic>...]\" or \"<token> *\"", source, line)
			}
			if len(tok) < 16 {
				return nil, fmt.Errorf("%s line %d: the token is %d characters, want at least 16 (`openssl rand -hex 16` makes one)", source, line, len(tok))
			}
			s := scope{name: fmt.Sprintf("%s:%d", source, line), topics: map[string]bool{}}
			if list, name, ok := cutAny(topics, " \t"); ok && strings.TrimSpace(name) != "" {
				topics, s.name = list, strings.TrimSpace(name)
			}
			for _, t := range strings.Split(topics, ",") {
				switch t = strings.TrimSpace(t); t {
				case "":
				case "*":
					s.all = true
				case "+canary":
					s.canary = true
				default:
					s.topics[t] = true
				}
			}
			h := sha256.Sum256([]byte(tok))
			if _, dup := a.scopes[h]; dup {
				return nil, fmt.Errorf("%s line %d: token defined twice", source, line)
			}
			a.scopes[h] = s
		}
	}
	return a, sc.Err()
}

func cutAny(s, seps string) (before, after string, found bool) {
	if i := strings.IndexAny(s, seps); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// LoadAuth builds the token table from a file and an inline definition; both
// may be empty, and an empty table means authentication is off. Its
// errors name the Config fields they come from (TokensFile, Tokens).
func LoadAuth(file, inline string) (*Auth, error) {
	a := &Auth{scopes: map[[32]byte]scope{}}
	if file != "" {
		raw, err := secretfile.Read(file)
		if err != nil {
			return nil, fmt.Errorf("Config.TokensFile: %w", err)
		}
		fa, err := ParseTokens(bytes.NewReader(raw), file)
		if err != nil {
			return nil, err
		}
		a = fa
	}
	if inline != "" {
		ia, err := ParseTokens(strings.NewReader(inline), "Config.Tokens")
		if err != nil {
			return nil, err
		}
		for h, s := range ia.scopes {
			if _, dup := a.scopes[h]; dup {
				return nil, fmt.Errorf("%s: token also defined in %s", s.name, file)
			}
			a.scopes[h] = s
		}
	}
	return a, nil
}

// Enabled reports whether any token is configured.
func (a *Auth) Enabled() bool { return len(a.scopes) > 0 }

// authenticate finds r's token's scope, or says why not (401).
func (a *Auth) authenticate(r *http.Request) (scope, int, string) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return scope{}, http.StatusUnauthorized, "missing bearer token: send Authorization: Bearer <token>"
	}
	s, ok := a.scopes[sha256.Sum256([]byte(strings.TrimSpace(tok)))]
	if !ok {
		return scope{}, http.StatusUnauthorized, "unknown bearer token"
	}
	return s, 0, ""
}

// Authenticate checks r's token before the topic is known: it returns a
// function that reports whether the caller may use a topic, or the HTTP
// status (401) and the reason.
func (a *Auth) Authenticate(r *http.Request) (allows func(topic string) bool, status int, reason string) {
	if !a.Enabled() {
		return func(string) bool { return true }, 0, ""
	}
	s, status, reason := a.authenticate(r)
	if status != 0 {
		return nil, status, reason
	}
	return s.Allows, 0, ""
}

// Check authenticates r. It returns the caller's scope (the zero scope
// when authentication is off), or the HTTP status (401 or 403) and the
// reason.
func (a *Auth) Check(r *http.Request, topic string) (scope, int, string) {
	if !a.Enabled() {
		return scope{}, 0, ""
	}
	s, status, reason := a.authenticate(r)
	if status != 0 {
		return scope{}, status, reason
	}
	if !s.Allows(topic) {
		return s, http.StatusForbidden, fmt.Sprintf("token may not write topic %q", topic)
	}
	return s, 0, ""
}
