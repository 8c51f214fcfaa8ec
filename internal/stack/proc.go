// Package stack runs the real components sluice talks to on one machine: the
// redis-server binary and the Consul agent as child processes, and Kafka as an
// in-process kfake cluster. It is used by `sluice dev` and by the test bed in
// internal/testenv, and so does not import testing.
package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrAddrInUse is wrapped by errors returned when a component could not
// listen because its address is taken, so that callers choosing free ports
// can retry with another one.
var ErrAddrInUse = errors.New("address already in use")

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. The
// port is not reserved: something else may take it before it is used, so
// callers that choose ports this way should retry on ErrAddrInUse.
//
// It picks below the kernel's ephemeral range (ip_local_port_range), at
// random: a port from ":0" comes from that range, where every outgoing
// connection (a Redis client, a Kafka fetch) takes its local port too, and
// on a busy machine one did take a port between this pick and the listen
// (a CI run failed on it). Without the range it falls back to ":0".
func FreePort() (int, error) {
	if lo, ok := ephemeralLow(); ok && lo > freeLow+1000 {
		for range 100 {
			port := freeLow + rand.IntN(lo-freeLow)
			if !holdPort(port) {
				continue
			}
			if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				ln.Close()
				return port, nil
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// freeLow is the lowest port FreePort picks: above the usual services'.
const freeLow = 20000

// portHold is how long a port FreePort returned is not returned again, by
// any process on the machine: go test runs packages in parallel processes,
// and one's test bed took a port another had just picked (a CI run failed
// on it).
const portHold = 3 * time.Minute

// holdPort marks port as handed out, in a file per port under the temporary
// directory, and reports false if another pick holds it still.
func holdPort(port int) bool {
	dir := filepath.Join(os.TempDir(), "sluice-free-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // no record to keep: the listen check alone decides
	}
	name := filepath.Join(dir, strconv.Itoa(port))
	for range 2 {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err == nil {
			f.Close()
			return true
		}
		if !errors.Is(err, os.ErrExist) {
			return true // no record to keep: the listen check alone decides
		}
		if info, err := os.Stat(name); err == nil && time.Since(info.ModTime()) < portHold {
			return false
		}
		os.Remove(name) // an old hold (or one just removed): take it over
	}
	return false
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	lo, err := strconv.Atoi(f[0])
	return lo, err == nil
}

// CheckAddrFree returns nil if addr can be listened on. If the address is
// taken, the error wraps ErrAddrInUse and says what the port was for, and
// which flag, if flag is not empty, chooses another port:
//
//	port 6390 (redis) is already in use: stop the other process or pass --redis-addr
func CheckAddrFree(addr, what, flag string) error {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln.Close()
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("cannot listen on %s (%s): %w", addr, what, err)
	}
	port := addr
	if _, p, splitErr := net.SplitHostPort(addr); splitErr == nil {
		port = p
	}
	hint := "stop the other process or choose another port"
	if flag != "" {
		hint = "stop the other process or pass " + flag
	}
	return fmt.Errorf("port %s (%s) is already in use: %s: %w", port, what, hint, ErrAddrInUse)
}

// proc is one run of a child process. A single goroutine calls cmd.Wait, and
// everyone else learns about the exit through done, so Wait is never called
// twice and the child is always reaped.
type proc struct {
	name string
	cmd  *exec.Cmd
	tail *tailBuffer
	logf *os.File // the default log file, closed after exit; nil if the caller gave a writer

	// termCodes are exit codes that count as a clean exit after our
	// SIGTERM, for children that do not exit 0 on it.
	termCodes []int

	done chan struct{} // closed once cmd.Wait returned
	err  error         // cmd.Wait's result, read only after done
}

// startProc starts bin with args in dir. Output goes to out, or if out is nil,
// to dir/logName; the last few KiB are also kept to explain an early exit.
func startProc(name, bin string, args []string, dir, logName string, out io.Writer) (*proc, error) {
	p := &proc{name: name, tail: &tailBuffer{max: 4 << 10}, done: make(chan struct{})}
	if out == nil {
		f, err := os.OpenFile(dir+"/"+logName, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening %s log: %w", name, err)
		}
		p.logf = f
		out = f
	}
	w := io.MultiWriter(out, p.tail)

	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = w
	cmd.Stderr = w
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Our own process group: a terminal's Ctrl-C does not reach the
		// child behind our back, and Kill can signal the child together
		// with anything it forked (redis forks for AOF rewrites).
		Setpgid: true,
		// The kernel kills the child when we die, even by SIGKILL, so no
		// test run or `sluice dev` leaves servers behind. (Strictly, it
		// fires when the OS thread that started the child exits; the Go
		// runtime only retires threads of goroutines that exit while
		// locked with LockOSThread, which we never do.)
		Pdeathsig: syscall.SIGKILL,
	}
	// Output is copied through a pipe; if a grandchild kept the pipe open
	// after the child died, Wait would block on it forever without this.
	cmd.WaitDelay = time.Second
	p.cmd = cmd

	if err := cmd.Start(); err != nil {
		if p.logf != nil {
			p.logf.Close()
		}
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		if p.logf != nil {
			p.logf.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// closedChan is returned for a process that never started.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// exitedChan is closed when the current run of the child has exited.
func exitedChan(p *proc) <-chan struct{} {
	if p == nil {
		return closedChan
	}
	return p.done
}

// exited reports whether the child has exited and been reaped.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes an exit that happened while we were waiting for the
// child to become ready, with the tail of its output.
func (p *proc) exitError() error {
	err := fmt.Errorf("%s exited during startup: %v\n--- last output ---\n%s", p.name, p.err, p.tail.String())
	if p.tail.contains("address already in use") {
		return fmt.Errorf("%w (%w)", err, ErrAddrInUse)
	}
	return err
}

// stop sends SIGTERM and waits for the exit; if ctx ends first, the whole
// process group is killed and ctx's error returned.
func (p *proc) stop(ctx context.Context) error {
	if p.exited() {
		return nil
	}
	// Only the child itself: it shuts its own helpers down in order.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return p.cleanExit(syscall.SIGTERM)
	case <-ctx.Done():
		p.kill()
		return fmt.Errorf("%s did not exit after SIGTERM, killed it: %w", p.name, ctx.Err())
	}
}

// kill sends SIGKILL to the child's process group and waits for the exit.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	// The negative pid signals the group; ESRCH just means it is gone.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// cleanExit returns nil if the child exited with status 0 or one of
// termCodes, or died of sig, which we sent; anything else is reported with
// the output's tail.
func (p *proc) cleanExit(sig syscall.Signal) error {
	if p.err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == sig {
			return nil
		}
		if slices.Contains(p.termCodes, ee.ExitCode()) {
			return nil
		}
	}
	return fmt.Errorf("%s exited with %v\n--- last output ---\n%s", p.name, p.err, p.tail.String())
}

// waitReady polls check with a small backoff until it returns nil, the child
// exits, or ctx ends. The last check error explains a timeout.
func (p *proc) waitReady(ctx context.Context, check func(context.Context) error) error {
	// A check in flight is abandoned when the child exits: it may be
	// talking to whoever else holds the port.
	checkCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-checkCtx.Done():
		}
	}()
	backoff := 5 * time.Millisecond
	for {
		err := check(checkCtx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-p.done:
			t.Stop()
			return p.exitError()
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s not ready: %w (last check: %v)", p.name, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func (b *tailBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Contains(bytes.ToLower(b.buf), []byte(strings.ToLower(s)))
}

// lookBin resolves bin, or def from PATH, to an executable; missing is the
// error text used when it cannot be found.
func lookBin(bin, def, missing string) (string, error) {
	if bin == "" {
		bin = def
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("%s (%v)", missing, err)
	}
	return path, nil
}
