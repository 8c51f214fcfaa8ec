package reload

import (
	"context"
	"errors"
	"github.com/sluicehq/sluice/internal/testenv"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWatchAppliesChangesAndKeepsTheLastGood(t *testing.T) {
	file := filepath.Join(t.TempDir(), "conf")
	os.WriteFile(file, []byte("one"), 0o600)
	var logs testenv.LogBuffer
	applied := make(chan string, 10)
	signals := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(ctx, file, "test", Options{Every: 10 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&logs, nil)), Signals: signals},
			func(path string) (string, error) {
				b, err := os.ReadFile(path)
				if strings.HasPrefix(string(b), "bad") {
					return "", errors.New("refused content")
				}
				return string(b), err
			},
			func(v string) { applied <- v })
	}()
	next := func() string {
		select {
		case v := <-applied:
			return v
		case <-time.After(5 * time.Second):
			t.Fatal("nothing applied")
			return ""
		}
	}
	// The first look applies what the file holds then: "one", or "two"
	// if the write below came first.
	replaceFile(t, file, "two")
	if v := next(); v == "one" {
		if v = next(); v != "two" {
			t.Fatalf("applied %q", v)
		}
	} else if v != "two" {
		t.Fatalf("applied %q", v)
	}
	replaceFile(t, file, "bad value")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "refused content") {
		if time.Now().After(deadline) {
			t.Fatalf("the bad content was not logged: %s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if strings.Count(logs.String(), "refused content") != 1 {
		t.Errorf("a refused content is logged once: %s", logs.String())
	}
	select {
	case v := <-applied:
		t.Fatalf("a refused content was applied: %q", v)
	default:
	}
	replaceFile(t, file, "three")
	if v := next(); v != "three" {
		t.Fatalf("applied %q", v)
	}
	signals <- os.Interrupt // a SIGHUP: read again though unchanged
	if v := next(); v != "three" {
		t.Fatalf("after a signal: %q", v)
	}
	cancel()
	<-done
}

// replaceFile gives file new content in one step, as an operator's editor
// or a secret manager's rename does: os.WriteFile truncates first, and a
// look between the truncation and the write read an empty file, which this
// test's parser takes (it failed once so, "a refused content was applied").
func replaceFile(t *testing.T, file, content string) {
	t.Helper()
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}
