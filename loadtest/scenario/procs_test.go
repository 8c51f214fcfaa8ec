package scenario

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// comm may hold spaces and parentheses; fields count from the last ')'.
	line := "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 123456 1000 50 18446744073709551615\n"
	st, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.comm != "a (b) c" || st.ppid != 17 || st.utime != 250 || st.stime != 75 || st.start != 123456 {
		t.Fatalf("%+v", st)
	}
	if _, err := parseProcStat([]byte("4242 (x) S 1 2 3")); err == nil {
		t.Fatal("a short line parsed")
	}
}

// fakeProc writes a /proc with the given processes: pid -> ppid, comm and
// command line.
func fakeProc(t *testing.T, procs map[int]struct {
	ppid       int
	comm, args string
}) string {
	root := t.TempDir()
	for pid, p := range procs {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := fmt.Sprintf("%d (%s) S %d 1 1 0 -1 0 0 0 0 0 %d 10 0 0 20 0 4 0 %d 0 0\n", pid, p.comm, p.ppid, pid, 1000+pid)
		os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644)
		os.WriteFile(filepath.Join(dir, "cmdline"), []byte(strings.ReplaceAll(p.args, " ", "\x00")+"\x00"), 0o644)
	}
	os.MkdirAll(filepath.Join(root, "self"), 0o755) // not a pid
	return root
}

type fakeProcess = struct {
	ppid       int
	comm, args string
}

func TestFindProcessesSplit(t *testing.T) {
	root := fakeProc(t, map[int]fakeProcess{
		1:   {0, "init", "/sbin/init"},
		100: {1, "sluice", "bin/sluice dev --dir x --split-processes"},
		101: {100, "sluice", "bin/sluice dev --dir x --split-processes --only-part kafka"},
		102: {100, "redis-server", "redis-server 127.0.0.1:6390"},
		103: {102, "redis-server", "redis-rdb-bgsave"}, // a fork: INFO cpu covers Redis
		104: {100, "consul", "consul agent -dev"},
		105: {100, "sluice", "bin/sluice dev --dir x --split-processes --only-part relay"},
		106: {100, "sluice", "bin/sluice dev --dir x --split-processes -only-part=worker"},
		107: {100, "sluice", "bin/sluice dev --dir x --split-processes --only-part=coordinator"},
		108: {100, "sluice", "bin/sluice dev --dir x --split-processes --only-part gate"},
		200: {1, "sluice", "bin/sluice dev --only-part gate"}, // another stack's
	})
	ps, err := findProcesses(root, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, fmt.Sprintf("%s:%d:%v:%v", p.Name, p.Pid, p.Parts, p.Sluice))
	}
	want := []string{"gate:108:[gate]:true", "kafka:101:[kafka]:true", "relay:105:[relay]:true", "worker:106:[worker]:true",
		"coordinator:107:[coordinator]:true", "dev:100:[]:true", "consul:104:[]:false"}
	if !slices.Equal(got, want) {
		t.Fatalf("processes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Their CPU as the phases read it: utime 10 ticks over pid's, stime 10.
	s := readProc(root, 108)
	if s.err != nil || s.start != 1108 || s.seconds != 1.18 {
		t.Fatalf("%+v", s)
	}
}

func TestFindProcessesOneProcess(t *testing.T) {
	root := fakeProc(t, map[int]fakeProcess{
		100: {1, "sluice", "bin/sluice dev --dir x"},
		102: {100, "redis-server", "redis-server 127.0.0.1:6390"},
		104: {100, "consul", "consul agent -dev"},
	})
	ps, err := findProcesses(root, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Name != "sluice dev" || !slices.Equal(ps[0].Parts, devPartNames) || ps[1].Name != "consul" {
		t.Fatalf("%+v", ps)
	}
	if _, err := findProcesses(root, 999); err == nil {
		t.Fatal("a missing process found")
	}
}

// On this machine's /proc: a child started with --only-part is found as
// that part, and its CPU time is read.
func TestFindProcessesHere(t *testing.T) {
	if os.Getenv("SLUICE_LOADTEST_SLEEPER") == "1" {
		time.Sleep(time.Minute)
		return
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFindProcessesHere$", "--", "--only-part", "relay")
	cmd.Env = append(os.Environ(), "SLUICE_LOADTEST_SLEEPER=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	ps, err := findProcesses("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ps, func(p Process) bool { return p.Pid == cmd.Process.Pid })
	if i < 0 || ps[i].Name != "relay" || ps[len(ps)-1].Name != "dev" || ps[len(ps)-1].Pid != os.Getpid() {
		t.Fatalf("%+v", ps)
	}
	s := readProc("/proc", os.Getpid())
	if s.err != nil || s.start == 0 || s.seconds <= 0 {
		t.Fatalf("%+v", s)
	}
}
