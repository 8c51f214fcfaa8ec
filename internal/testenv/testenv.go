// Package testenv is the test bed: real Redis, Consul and Kafka for one test
// or one package, started and cleaned up by the helpers here.
//
// Each component has two entry points sharing one implementation:
//
//   - Redis(t), Consul(t), Kafka(t) start a component for a test and stop it,
//     removing its files, in t.Cleanup. Their control methods (Stop, Kill,
//     Restart, ...) fail the test on error.
//   - StartRedis, StartConsul, StartKafka return (value, error) for TestMain,
//     and the caller calls Close. There is no test to fail there, so their
//     control methods panic on error; share such a component only between
//     tests that do not restart it.
//
// SLUICE_TESTENV chooses how the components run. Unset or "process" runs the
// redis-server and consul binaries as child processes and Kafka in process
// (kfake), see internal/stack. "docker" runs the real images through
// testcontainers-go instead: redis:7.4, hashicorp/consul:1.15.4 and
// apache/kafka:3.9.0. A missing binary or Docker engine fails the test, it
// never skips it: a test bed that silently runs nothing hides broken tests.
//
// Kafka has a second setting, SLUICE_TEST_KAFKA (EnvKafka): kfake, the
// default, or real Apache Kafka brokers from bin/kafka as child processes
// (KRaft), which a test that depends on the broker's behaviour asks for with
// ApacheKafka(). Those tests skip, saying how to fetch the broker, when
// bin/kafka is missing, except under CI=true (docs/kafka.md).
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/stack"
)

// EnvMode is the environment variable choosing the test bed.
const EnvMode = "SLUICE_TESTENV"

const (
	modeProcess = "process"
	modeDocker  = "docker"
)

// Timeouts for starting and stopping components. Starting covers Consul's
// leader election and, in docker mode, Kafka's JVM; none of it is expected to
// take long, the bounds only keep a wedged component from hanging a run.
const (
	startTimeout = 2 * time.Minute
	stopTimeout  = 15 * time.Second
)

func mode() (string, error) {
	switch m := os.Getenv(EnvMode); m {
	case "", modeProcess:
		return modeProcess, nil
	case modeDocker:
		return modeDocker, nil
	default:
		return "", fmt.Errorf("testenv: unknown %s=%q: use %q (the default) or %q", EnvMode, m, modeProcess, modeDocker)
	}
}

// failer fails the test it was made for, or panics if there is none (the
// StartX entry points, used from TestMain).
type failer struct{ tb testing.TB }

func (f failer) fatalf(format string, args ...any) {
	if f.tb != nil {
		f.tb.Helper()
		f.tb.Fatalf(format, args...)
		return
	}
	panic(fmt.Sprintf(format, args...))
}

// do runs op with a context that ends after timeout and fails with
// "testenv: <what>: <error>" if op does.
func (f failer) do(timeout time.Duration, what string, op func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := op(ctx); err != nil {
		f.fatalf("testenv: %s: %v", what, err)
	}
}

// forTest is the body of Redis(t), Consul(t) and Kafka(t): it fails t if
// starting c failed, and closes c in t.Cleanup.
func forTest[C interface{ Close() error }](t testing.TB, name string, c C, err error) C {
	t.Helper()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("testenv: closing %s: %v", name, err)
		}
	})
	return c
}

// startBackend starts a component's backend the way EnvMode chooses, with a
// context bounded by startTimeout.
func startBackend[B any](process, docker func(context.Context) (B, error)) (B, error) {
	m, err := mode()
	if err != nil {
		var none B
		return none, err
	}
	ctx, cancel := startCtx()
	defer cancel()
	if m == modeDocker {
		return docker(ctx)
	}
	return process(ctx)
}

// withFreePort calls start with free ports until it does not fail with
// stack.ErrAddrInUse: a port found free can be taken again before the child
// binds it, and only the caller that chose the port can choose another.
func withFreePort(start func(port int) error) error {
	var err error
	for range 5 {
		var port int
		if port, err = stack.FreePort(); err != nil {
			return err
		}
		if err = start(port); !errors.Is(err, stack.ErrAddrInUse) {
			return err
		}
	}
	return err
}

func startCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), startTimeout)
}

func stopCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), stopTimeout)
}

// removeDir removes a component's scratch directory; "" is nothing.
func removeDir(dir string) error {
	if dir == "" {
		return nil
	}
	return os.RemoveAll(dir)
}
