package main

import (
	"strings"
	"testing"
)

// TestJobsUsageErrorsExitTwo: docs/admin.md says a usage error exits 2; a
// flag out of range, a wrong argument count and an unknown subcommand of
// `sluice jobs` are usage errors, each said on stderr (issue 32). No
// console is needed: none of them reaches the admin API.
func TestJobsUsageErrorsExitTwo(t *testing.T) {
	nowhere := "http://127.0.0.1:1" // never dialled: the usage is checked first
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "ls", "--limit", "0"}, "--limit 0: want 1..1000"},
		{[]string{"jobs", "ls", "--state", "sleeping"}, `--state "sleeping": want one of`},
		{[]string{"jobs", "ls", "--all", "--cursor", "0.0.5"}, "not both"},
		{[]string{"jobs", "ls", "extra", "--partition", "0"}, "want arguments none"},
		{[]string{"jobs", "cancel", "jobs"}, "want arguments <topic> <id>"},
		{[]string{"jobs", "show", "jobs"}, "want arguments <topic> <id>"},
		{[]string{"jobs", "lss"}, `unknown command "lss"`},
		{[]string{"jobs", "ls", "--no-such-flag"}, "flag provided but not defined"},
	} {
		code, out, errOut := cliRun(append(c.args, "--admin-url", nowhere)...)
		if code != 2 || !strings.Contains(out+errOut, c.want) {
			t.Errorf("sluice %s: exit %d, want 2 saying %q\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), code, c.want, out, errOut)
		}
	}
}

// TestSubcommandHelpIsItsOwn: `sluice periodic set --help` heads with its
// own synopsis, not the parent's `sluice periodic [flags]` (issue 32).
func TestSubcommandHelpIsItsOwn(t *testing.T) {
	code, out, errOut := cliRun("periodic", "set", "--help")
	if code != 0 || !strings.HasPrefix(out, "Usage: sluice periodic set <name> (--cron C") || !strings.Contains(out, "--every") {
		t.Errorf("sluice periodic set --help: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestDevCoordinatorAddrHelpNamesTheConsole: sluice dev serves the admin
// API and the dashboard on --coordinator-addr, and its help says so
// (issue 32).
func TestDevCoordinatorAddrHelpNamesTheConsole(t *testing.T) {
	code, out, errOut := cliRun("dev", "--help")
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "--coordinator-addr") {
			line = l
		}
	}
	if code != 0 || !strings.Contains(line, "admin API") || !strings.Contains(line, "dashboard") {
		t.Errorf("sluice dev --help: exit %d, --coordinator-addr line %q\nstderr: %s", code, line, errOut)
	}
}
