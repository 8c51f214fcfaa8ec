package worker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Job is what a handler gets: one execution attempt of a job.
type Job struct {
	ID       string
	Type     string
	Group    string
	Tenant   string
	Resource string
	Topic    string
	// Payload is the envelope's payload, byte for byte as the client sent it.
	Payload []byte
	// Attempt is 1 for the first execution.
	Attempt     int
	MaxAttempts int
	EnqueuedAt  time.Time
	// Throttles is how often this attempt waited in delayed for its
	// resource's rate-limit slot: 0 or 1, more only after its limit
	// changed or it missed its slot.
	Throttles int
}

// Handler executes jobs of a type. The context carries the attempt's
// deadline and is cancelled when the worker loses the job's lease or shuts
// down past its drain deadline. A nil error means success; the result, if
// any, is kept with the job. Wrap an error with Permanent to send the job
// straight to the dead set, or with RetryAfter to choose the next try.
type Handler interface {
	Handle(ctx context.Context, job *Job) (result []byte, err error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) ([]byte, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job *Job) ([]byte, error) { return f(ctx, job) }

// Middleware wraps a handler (logging, tracing, rate limits, ...).
type Middleware func(Handler) Handler

// Permanent marks err as not worth retrying: the job goes to the dead set
// with it now.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// RetryAfter asks for the next try after d instead of the backoff's choice
// (a downstream's Retry-After, say). The attempt still counts.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAfterError{d: d, err: err}
}

type retryAfterError struct {
	d   time.Duration
	err error
}

func (e *retryAfterError) Error() string { return fmt.Sprintf("retry after %s: %v", e.d, e.err) }
func (e *retryAfterError) Unwrap() error { return e.err }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// RetryDelay returns the delay asked for with RetryAfter, if any.
func RetryDelay(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.d, true
	}
	return 0, false
}
