package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"nope"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unknown command "nope"`) {
		t.Fatalf("unknown command: exit %d, %q", code, errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"gate", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("gate --help: exit %d", code)
	}
	for _, want := range []string{"--kafka-brokers", "SLUICE_GATE_KAFKA_BROKERS", "--tokens-file", "--max-body-bytes", "(default 1048576)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("gate --help lacks %q:\n%s", want, out.String())
		}
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"gate", "--no-such-flag"}, &out, &errOut); code != 2 {
		t.Fatalf("bad flag: exit %d", code)
	}
	t.Setenv("SLUICE_GATE_MAX_BATCH_JOBS", "many")
	errOut.Reset()
	if code := run(context.Background(), []string{"gate"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "SLUICE_GATE_MAX_BATCH_JOBS") {
		t.Fatalf("bad environment value: exit %d, %q", code, errOut.String())
	}
}
