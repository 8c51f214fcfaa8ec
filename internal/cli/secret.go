package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/secretfile"
)

// Secret is a credential (a password, a token): given inline by a flag or
// its SLUICE_* variable, or, better, by a file that only the process's user
// can read (Read refuses one the user owns that others may read:
// internal/secretfile). The file is re-read on every Read, so a rotated secret needs no
// restart where the caller reads it again. A Secret never prints its value:
// not in --help, a log line or an error.
type Secret struct {
	// Value is the secret inline. Default "". Prefer File or the
	// environment: a flag shows in ps.
	Value string
	// File holds the secret (surrounding white space is trimmed). It wins
	// over Value. Default "".
	File string
}

// Set reports whether either form is given.
func (s Secret) Set() bool { return s.Value != "" || s.File != "" }

// Read returns the secret: the file's content when File is set, else
// Value. Its error names the file, never the content.
func (s Secret) Read() (string, error) {
	if s.File == "" {
		return s.Value, nil
	}
	b, err := secretfile.Read(s.File)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("secret file %s is empty", s.File)
	}
	return v, nil
}

// String hides the value, so that printing a Config shows no secret.
func (s Secret) String() string {
	switch {
	case s.File != "":
		return "file:" + s.File
	case s.Value != "":
		return "<redacted>"
	}
	return ""
}

// LogValue hides the value from slog, whose handlers would otherwise
// print the struct's fields.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON hides the value from a Config printed as JSON.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// GoString hides the value from %#v.
func (s Secret) GoString() string { return "cli.Secret(" + strconv.Quote(s.String()) + ")" }

// SecretVar adds --<name> (inline) and --<name>-file to fs, bound to s.
// The inline flag's help says to prefer the file or the variable.
func SecretVar(fs *flag.FlagSet, s *Secret, name, usage string) {
	fs.Var(secretValue{&s.Value}, name, usage+" (prefer --"+name+"-file or the environment: flags show in ps)")
	fs.StringVar(&s.File, name+"-file", s.File, "file holding "+usage+" (re-read when needed; wins over --"+name+")")
}

// secretValue is a flag.Value that never shows its value in --help.
type secretValue struct{ p *string }

func (v secretValue) String() string { return "" }
func (v secretValue) Set(s string) error {
	if v.p == nil {
		return errors.New("secret: no destination")
	}
	*v.p = s
	return nil
}
