package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// DevConfig starts `sluice dev` as a child process on free ports, so that
// a run needs nothing started by hand and leaves nothing behind.
type DevConfig struct {
	Bin string // the sluice binary
	// Dir holds the stack's data; empty: a new temporary directory,
	// removed on Stop.
	Dir string
	// RedisMaxMemory is passed as --redis-maxmemory when set.
	RedisMaxMemory string
	// SplitProcesses passes --split-processes: Kafka and each part run in
	// a process of their own, whose CPU the phases report apart.
	SplitProcesses bool
	// Args are more flags for `sluice dev`.
	Args []string
	// Log receives the child's output (nil: a file in Dir).
	Log io.Writer
}

// Dev is a running `sluice dev`.
type Dev struct {
	Endpoints Endpoints
	cmd       *exec.Cmd
	dir       string
	temp      bool
	exited    chan struct{} // closed when the child exited; then waitErr is its end
	waitErr   error
	logFile   *os.File
}

// StartDev starts the stack and waits until every part answers /readyz.
func StartDev(ctx context.Context, cfg DevConfig) (*Dev, error) {
	d := &Dev{dir: cfg.Dir, exited: make(chan struct{})}
	if d.dir == "" {
		dir, err := os.MkdirTemp("", "sluice-loadtest-")
		if err != nil {
			return nil, err
		}
		d.dir, d.temp = dir, true
	}
	ports, err := freePorts(7)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	ep := DevEndpoints()
	ep.Gate, ep.Redis, ep.Consul = "http://"+addr(0), addr(2), addr(3)
	ep.Relay, ep.Worker, ep.Coordinator = "http://"+addr(4), "http://"+addr(5), "http://"+addr(6)
	d.Endpoints = ep
	args := []string{"dev", "--dir", filepath.Join(d.dir, "stack"), "--log-level", "warn",
		"--gate-addr", addr(0), "--kafka-addr", addr(1), "--redis-addr", addr(2), "--consul-addr", addr(3),
		"--relay-addr", addr(4), "--worker-addr", addr(5), "--coordinator-addr", addr(6)}
	if cfg.RedisMaxMemory != "" {
		args = append(args, "--redis-maxmemory", cfg.RedisMaxMemory)
	}
	if cfg.SplitProcesses {
		args = append(args, "--split-processes")
	}
	args = append(args, cfg.Args...)
	d.cmd = exec.Command(cfg.Bin, args...)
	d.cmd.Env = os.Environ()
	// The stack dies with this process, whatever happens to it.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out := cfg.Log
	if out == nil {
		f, err := os.Create(filepath.Join(d.dir, "sluice-dev.log"))
		if err != nil {
			d.cleanup()
			return nil, err
		}
		d.logFile, out = f, f
	}
	d.cmd.Stdout, d.cmd.Stderr = out, out
	if err := d.cmd.Start(); err != nil {
		d.cleanup()
		return nil, fmt.Errorf("starting %s dev: %w", cfg.Bin, err)
	}
	go func() { d.waitErr = d.cmd.Wait(); close(d.exited) }()

	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for _, base := range []string{ep.Relay, ep.Worker, ep.Coordinator, ep.Gate} {
		if err := waitReady(startCtx, client, base+"/readyz", d.exited); err != nil {
			d.Stop()
			return nil, fmt.Errorf("sluice dev did not get ready (%s; its log: %s): %w", base, d.LogPath(), err)
		}
	}
	return d, nil
}

// Processes are the stack's processes on this machine: sluice dev's own,
// its children of --split-processes (one per part) and its Consul agent
// (see findProcesses). Read them once the stack is up.
func (d *Dev) Processes() ([]Process, error) {
	return findProcesses("/proc", d.cmd.Process.Pid)
}

// LogPath is the child's log file ("" when Log was given).
func (d *Dev) LogPath() string {
	if d.logFile == nil {
		return ""
	}
	return d.logFile.Name()
}

// Dir is the stack's directory.
func (d *Dev) Dir() string { return d.dir }

// Stop ends the stack (SIGTERM, then SIGKILL after 30 s) and removes a
// temporary directory.
func (d *Dev) Stop() error {
	var err error
	if d.cmd.Process != nil {
		d.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(30 * time.Second)
		select {
		case <-d.exited:
		case <-t.C:
			d.cmd.Process.Kill()
			<-d.exited
		}
		t.Stop()
		err = d.waitErr
		var exit *exec.ExitError
		if errors.As(err, &exit) && !exit.Exited() {
			err = nil // ended by our signal
		}
	}
	d.cleanup()
	return err
}

func (d *Dev) cleanup() {
	if d.logFile != nil {
		d.logFile.Close()
	}
	if d.temp {
		os.RemoveAll(d.dir)
	}
}

func waitReady(ctx context.Context, client *http.Client, url string, exited <-chan struct{}) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := client.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-t.C:
		case <-exited:
			return errors.New("it exited")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// freePorts are n ports free now (the kernel's picks, released again).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
