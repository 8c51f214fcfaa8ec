package worker

import (
	"context"
	"fmt"
	"time"
)

// Outcome is how the worker settles one attempt of a job (Worker.Try).
type Outcome struct {
	// Result is what the handler returned: on success, kept with the job
	// if it asked for retain and gathered by its bulk group.
	Result []byte
	// Err is the attempt's error; nil is success (the job is done).
	Err error
	// Retry: the attempt failed and the job runs again after RetryIn
	// (RetryAfter's delay, else the type's TypeRetryDelay, else the
	// backoff: Config.Backoff doubling per attempt up to MaxBackoff, ±20%).
	Retry   bool
	RetryIn time.Duration
	// Dead: the attempt failed and the job goes to the dead set
	// (Permanent, or its last attempt).
	Dead bool
	// MaxAttempts and Timeout are the limits the attempt ran under: the
	// envelope's, else the type's (TypeMaxAttempts, TypeTimeout), else
	// Config's.
	MaxAttempts int
	Timeout     time.Duration
}

// Try runs one attempt of j on the handler w has for j.Type, as a
// consumer runs a claimed job but without Redis, and returns how it would
// be settled. The handler is wrapped in w's middleware (Use); the limits
// are j.MaxAttempts and timeout as the envelope sets them (0: not set),
// else the type's defaults, else Config's; the handler's context ends at
// the timeout; a panic is a failed attempt. j.Attempt 0 is taken as 1. A
// type without a handler fails the attempt, retried as in Run. For tests
// of handlers (client/sluicetest.Harness); Run never calls it.
func (w *Worker) Try(ctx context.Context, j *Job, timeout time.Duration) Outcome {
	run := *j // the handler may keep it; the caller's stays as given
	run.Attempt = max(run.Attempt, 1)
	handler, defaults := w.handler(run.Type)
	run.MaxAttempts = firstPositive(j.MaxAttempts, defaults.maxAttempts, w.cfg.MaxAttempts)
	out := Outcome{MaxAttempts: run.MaxAttempts, Timeout: firstPositive(timeout, defaults.timeout, w.cfg.Timeout)}
	if handler == nil {
		out.Err = fmt.Errorf("no handler for job type %q (retried later: a worker with the handler may take it)", run.Type)
	} else {
		jctx, cancel := context.WithTimeout(ctx, out.Timeout)
		out.Result, out.Err = call(jctx, handler, &run)
		cancel()
	}
	if out.Err != nil {
		out.RetryIn, out.Retry = w.retryIn(run.Type, out.Err, run.Attempt, run.MaxAttempts)
		out.Dead = !out.Retry
		out.Result = nil // a failure's result is not kept
	}
	return out
}

// retryIn is the delay before the next attempt of a job of jobType whose
// attempt failed with herr, and false when there is none (Permanent, or
// its last attempt): the job is dead. RetryAfter's delay wins, then the
// type's TypeRetryDelay, then the backoff. settle (recordFailure) and Try
// decide by it.
func (w *Worker) retryIn(jobType string, herr error, attempt, maxAttempts int) (time.Duration, bool) {
	if IsPermanent(herr) || attempt >= maxAttempts {
		return 0, false
	}
	if d, asked := RetryDelay(herr); asked {
		return d, true
	}
	w.mu.RLock()
	policy := w.handlers[jobType].defaults.retryDelay
	w.mu.RUnlock()
	if policy != nil {
		if d, ok := w.typeRetryDelay(jobType, policy, attempt, herr); ok {
			return d, true
		}
	}
	return w.backoff(attempt), true
}

// typeRetryDelay asks a type's policy; a negative answer, or a panic
// (logged: a failure must still be recorded), leaves the choice to the
// backoff.
func (w *Worker) typeRetryDelay(jobType string, policy func(int, error) time.Duration, attempt int, herr error) (d time.Duration, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("the job type's TypeRetryDelay panicked; the backoff chooses the delay", "type", jobType, "panic", p)
			d, ok = 0, false
		}
	}()
	d = policy(attempt, herr)
	return d, d >= 0
}

// TypeRetryDelay sets how long the type's jobs wait after a failed
// attempt (asynq's RetryDelayFunc, River's NextRetry): delay(attempt, err)
// is called with the attempt that failed (1 for the first) and its error.
// A negative delay leaves the choice to the worker's backoff (Config's
// Backoff doubling up to MaxBackoff), as for a type without it; a
// handler's RetryAfter wins over it. It is not called for a Permanent
// error or the last attempt (the job is dead). nil unsets it.
func TypeRetryDelay(delay func(attempt int, err error) time.Duration) HandleOption {
	return func(o *typeDefaults) { o.retryDelay = delay }
}
