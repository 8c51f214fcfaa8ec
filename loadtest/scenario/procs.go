package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Process is one process of a stack on this machine, whose CPU time the
// loadtest reads from /proc/<pid>/stat: sluice dev's own process, its
// children of --split-processes (one per part), and its Consul agent.
// Redis's CPU comes from its INFO cpu, which works for a remote Redis too.
type Process struct {
	// Name is the part the process runs ("gate", "kafka", "relay",
	// "worker", "coordinator"), "dev" for the --split-processes parent
	// that only watches its children, "sluice dev" for the one process
	// of the default layout, or "consul".
	Name string `json:"name"`
	// Parts are the pipeline's parts in the process: one for a part of its
	// own, every one for sluice dev's single process, none for the parent
	// or Consul.
	Parts []string `json:"parts,omitempty"`
	Pid   int      `json:"pid"`
	// Sluice is true for a sluice process: its CPU counts in the
	// pipeline's (Consul's does not).
	Sluice bool `json:"sluice"`
}

// devPartNames are sluice dev's parts in its default layout's one process,
// in the order the reports list them.
var devPartNames = []string{"gate", "kafka", "relay", "worker", "coordinator"}

// procTicks is the kernel's clock ticks per second in /proc/<pid>/stat
// (USER_HZ, 100 on every Linux this runs on).
const procTicks = 100

// procSample is one reading of a process's CPU time. Pid and start (clock
// ticks after boot) are its identity: a pid the kernel gave to another
// process since reads another start.
type procSample struct {
	pid     int
	start   uint64
	seconds float64
	err     error
}

// readProc reads /proc/<pid>/stat under root.
func readProc(root string, pid int) procSample {
	s := procSample{pid: pid}
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		s.err = err
		return s
	}
	st, err := parseProcStat(b)
	if err != nil {
		s.err = fmt.Errorf("pid %d: %w", pid, err)
		return s
	}
	s.start, s.seconds = st.start, float64(st.utime+st.stime)/procTicks
	return s
}

// procStat is what the loadtest reads of a /proc/<pid>/stat line.
type procStat struct {
	comm                string
	ppid                int
	utime, stime, start uint64
}

// parseProcStat reads "pid (comm) state ppid ... utime stime ... starttime
// ...": comm may hold spaces and parentheses, so the fields after it are
// counted from its last ')'.
func parseProcStat(b []byte) (procStat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procStat{}, errors.New("malformed stat line")
	}
	// After comm: state(3) ppid(4) ... utime(14) stime(15) ... starttime(22).
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("stat line with %d fields after comm, want at least 20", len(f))
	}
	var st procStat
	st.comm = string(b[open+1 : end])
	var errs [4]error
	st.ppid, errs[0] = strconv.Atoi(f[1])
	st.utime, errs[1] = strconv.ParseUint(f[11], 10, 64)
	st.stime, errs[2] = strconv.ParseUint(f[12], 10, 64)
	st.start, errs[3] = strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return procStat{}, err
	}
	return st, nil
}

// findProcesses lists the processes of the sluice dev whose pid is given,
// from the process tree under root (/proc): the process itself and its
// descendants. A child started with --only-part <part> runs that part, and
// then the process itself runs none; a process named consul is the Consul
// agent. Others (redis-server, which INFO cpu covers, or its forks) are
// left out.
func findProcesses(root string, pid int) ([]Process, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	comm := map[int]string{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue // gone since the listing
		}
		st, err := parseProcStat(b)
		if err != nil {
			continue
		}
		children[st.ppid] = append(children[st.ppid], p)
		comm[p] = st.comm
	}
	if _, ok := comm[pid]; !ok {
		return nil, fmt.Errorf("no process %d under %s", pid, root)
	}
	var out []Process
	split := false
	queue := slices.Clone(children[pid])
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		if part := onlyPart(root, p); part != "" {
			out = append(out, Process{Name: part, Parts: []string{part}, Pid: p, Sluice: true})
			split = true
		} else if comm[p] == "consul" {
			out = append(out, Process{Name: "consul", Pid: p})
		}
	}
	self := Process{Name: "sluice dev", Parts: slices.Clone(devPartNames), Pid: pid, Sluice: true}
	if split {
		self = Process{Name: "dev", Pid: pid, Sluice: true}
	}
	out = append(out, self)
	sortProcesses(out)
	return out, nil
}

// onlyPart is the value of --only-part in a process's command line ("":
// none, or the process is gone).
func onlyPart(root string, pid int) string {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return ""
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	part := ""
	for i, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		a = "-" + strings.TrimLeft(a, "-") // -x and --x are the same flag
		if v, ok := strings.CutPrefix(a, "-only-part="); ok {
			part = v
		} else if a == "-only-part" && i+1 < len(args) {
			part = args[i+1]
		}
	}
	return part
}

// sortProcesses orders processes as the reports list them: the parts in
// the pipeline's order, then the processes without a part of their own.
func sortProcesses(ps []Process) {
	rank := func(p Process) int {
		if i := slices.Index(devPartNames, p.Name); i >= 0 {
			return i
		}
		switch p.Name {
		case "sluice dev":
			return len(devPartNames)
		case "dev":
			return len(devPartNames) + 1
		}
		return len(devPartNames) + 2
	}
	slices.SortStableFunc(ps, func(a, b Process) int { return rank(a) - rank(b) })
}
