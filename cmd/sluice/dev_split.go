package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// devParts are the parts `sluice dev --split-processes` runs as children
// of their own, `sluice dev --only-part <part>`, in the order they start.
var devParts = []string{"kafka", "relay", "worker", "coordinator", "gate"}

// inProcess reports whether this process runs part itself: every part by
// default, none in a --split-processes parent, only its own in a child.
func (c devConfig) inProcess(part string) bool {
	if c.OnlyPart != "" {
		return c.OnlyPart == part
	}
	return !c.SplitProcesses
}

// devChildren are a --split-processes parent's children, one per part.
type devChildren struct {
	args           []string // the parent's own flags, which each child gets too
	stdout, stderr io.Writer
	died           chan error // a child that exited while not asked to
	pids           []string   // "kafka 1234", for the banner
}

func newDevChildren(args []string, stdout, stderr io.Writer) *devChildren {
	return &devChildren{args: args, stdout: stdout, stderr: stderr, died: make(chan error, len(devParts))}
}

// start runs `sluice dev <the parent's flags> --only-part part` and waits
// until it says its part is up (the line it prints on stdout then), it
// exits, or ctx ends. stop sends it SIGTERM and waits, up to the stop
// context, then kills it.
func (d *devChildren) start(ctx context.Context, part string) (stop func(context.Context) error, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%s: finding this binary to run it as a child: %w", part, err)
	}
	cmd := exec.Command(exe, append(append([]string{"dev"}, d.args...), "--only-part", part)...)
	cmd.Stderr = d.stderr
	// Its stdout is a pipe of our own (not StdoutPipe, which Wait closes
	// under a reader): the ready line, then whatever else it prints.
	out, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = pw
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// A terminal's Ctrl-C reaches the parent only, which stops the
		// children one by one in reverse order.
		Setpgid: true,
		// The children end with the parent, even when it is killed.
		Pdeathsig: syscall.SIGTERM,
	}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("%s: %w", part, err)
	}
	ready := make(chan struct{})
	go func() {
		defer out.Close()
		r := bufio.NewReader(out)
		if _, err := r.ReadString('\n'); err == nil {
			close(ready)
		}
		io.Copy(d.stdout, r)
	}()
	exited := make(chan struct{})
	var waitErr error
	var stopping atomic.Bool
	go func() {
		waitErr = cmd.Wait()
		close(exited)
		if !stopping.Load() {
			d.died <- fmt.Errorf("%s (pid %d) exited: %v", part, cmd.Process.Pid, waitErr)
		}
	}()
	stop = func(sctx context.Context) error {
		stopping.Store(true)
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return waitErr
		case <-sctx.Done():
		}
		// The child's own part had the same time to stop; give its
		// process a little more to end.
		t := time.NewTimer(childStopTimeout)
		defer t.Stop()
		select {
		case <-exited:
			return waitErr
		case <-t.C:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			return fmt.Errorf("%s did not stop in time, killed it: %w", part, sctx.Err())
		}
	}
	select {
	case <-ready:
		d.pids = append(d.pids, part+" "+strconv.Itoa(cmd.Process.Pid))
		return stop, nil
	case <-exited:
		stopping.Store(true)
		return nil, fmt.Errorf("%s exited during startup: %v", part, waitErr)
	case <-ctx.Done():
		serr := stop(context.Background())
		return nil, errors.Join(fmt.Errorf("%s did not start: %w", part, ctx.Err()), serr)
	}
}

// childReady is what a child prints on stdout once its part is up.
func childReady(w io.Writer, part string) {
	fmt.Fprintf(w, "sluice dev: %s up (pid %d)\n", part, os.Getpid())
	if f, ok := w.(*os.File); ok {
		f.Sync()
	}
}

// checkOnlyPart checks --only-part.
func checkOnlyPart(part string) error {
	if part == "" || slices.Contains(devParts, part) {
		return nil
	}
	return fmt.Errorf("--only-part %q: want one of %s", part, strings.Join(devParts, ", "))
}

// childStopTimeout is how long a parent waits for a child beyond the
// child's own --stop-timeout, for the child's process to end.
const childStopTimeout = 5 * time.Second
