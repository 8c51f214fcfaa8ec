package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecretFromFlagEnvironmentOrFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	parse := func(args ...string) Secret {
		t.Helper()
		var s Secret
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		SecretVar(fs, &s, "redis-password", "the Redis password")
		if err := Parse(fs, "relay", args); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got, _ := parse("--redis-password", "inline").Read(); got != "inline" {
		t.Fatalf("inline flag: read %q", got)
	}
	t.Setenv("SLUICE_RELAY_REDIS_PASSWORD", "from-env")
	if got, _ := parse().Read(); got != "from-env" {
		t.Fatalf("variable: read %q", got)
	}
	s := parse("--redis-password-file", file)
	if got, _ := s.Read(); got != "from-file" {
		t.Fatalf("file wins over the variable: read %q", got)
	}
	// Rotated on disk, read again: the new value, no restart.
	if err := os.WriteFile(file, []byte("rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Read(); got != "rotated" {
		t.Fatalf("after rotation: read %q", got)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty file: %v", err)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s := Secret{Value: "hunter2"}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	SecretVar(fs, &s, "kafka-sasl-password", "the SASL password")
	var help bytes.Buffer
	Usage(&help, fs, "gate")
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "cfg", struct{ Password Secret }{s})
	asJSON, _ := json.Marshal(struct{ Password Secret }{s})
	for _, shown := range []string{help.String(), s.String(), fs.Lookup("kafka-sasl-password").Value.String(), logged.String(), string(asJSON), fmt.Sprintf("%#v %+v %v", s, s, s)} {
		if strings.Contains(shown, "hunter2") {
			t.Fatalf("the secret is shown: %q", shown)
		}
	}
	if !strings.Contains(help.String(), "prefer --kafka-sasl-password-file") {
		t.Fatalf("--help does not point to the file:\n%s", help.String())
	}
}
