package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// TypedJob is one execution attempt of a job whose payload was decoded into
// a T. Its Payload is the decoded value; the envelope's bytes are still in
// the embedded Job's Payload (j.Job.Payload), and every other field of Job
// (ID, Attempt, MaxAttempts, ...) reads as on Job.
type TypedJob[T any] struct {
	*Job
	// Payload is the envelope's payload decoded with encoding/json into a
	// T: once per attempt, before the handler runs. A job without a
	// payload (or with null) gets T's zero value.
	Payload T
}

// TypedHandler executes jobs of a type whose payload is a T. It is Handler
// with the payload decoded: the same context, the same result (kept if the
// job asked for retain, gathered by a bulk group), the same Permanent and
// RetryAfter errors.
type TypedHandler[T any] interface {
	Handle(ctx context.Context, job *TypedJob[T]) (result []byte, err error)
}

// TypedHandlerFunc adapts a function to TypedHandler.
type TypedHandlerFunc[T any] func(ctx context.Context, job *TypedJob[T]) ([]byte, error)

// Handle calls f.
func (f TypedHandlerFunc[T]) Handle(ctx context.Context, job *TypedJob[T]) ([]byte, error) {
	return f(ctx, job)
}

// HandleTyped registers h for jobType on w: each job's payload is decoded
// into a T before h runs. A payload that does not decode is not retried
// (no attempt would decode it better): the job goes to the dead set with a
// Permanent error naming the job type and T, and h is not called.
// Middleware added with Use sees the job before the decode, as for Handle.
// opts set the type's own defaults (TypeTimeout, TypeMaxAttempts).
// Registering jobType again replaces its handler and options. jobType ""
// takes T's Kind() (client.JobArgs: the producer enqueues a T with the
// type ""), and panics when T has none.
func HandleTyped[T any](w *Worker, jobType string, h TypedHandler[T], opts ...HandleOption) {
	w.Handle(typeOf[T]("HandleTyped", jobType), Typed(h), opts...)
}

// HandleFunc registers f for jobType on w, its payload decoded into a T, as
// HandleTyped does (jobType "" takes T's Kind()): the sugar for a handler
// without a result. A nil error is success.
//
//	worker.HandleFunc(w, "email.send", func(ctx context.Context, j *worker.TypedJob[Email]) error {
//		return send(ctx, j.Payload.To, j.Payload.Subject)
//	}, worker.TypeTimeout(10*time.Second))
func HandleFunc[T any](w *Worker, jobType string, f func(ctx context.Context, job *TypedJob[T]) error, opts ...HandleOption) {
	HandleTyped(w, typeOf[T]("HandleFunc", jobType), TypedHandlerFunc[T](func(ctx context.Context, j *TypedJob[T]) ([]byte, error) {
		return nil, f(ctx, j)
	}), opts...)
}

// Typed adapts a TypedHandler to Handler, for Worker.Handle, HandleOther or
// a middleware chain of one's own: it decodes the payload into a T and
// calls h, or returns a Permanent error naming the job type and T when the
// payload does not decode.
func Typed[T any](h TypedHandler[T]) Handler {
	return HandlerFunc(func(ctx context.Context, j *Job) ([]byte, error) {
		tj := &TypedJob[T]{Job: j}
		if len(j.Payload) > 0 {
			if err := json.Unmarshal(j.Payload, &tj.Payload); err != nil {
				return nil, Permanent(fmt.Errorf("job type %q: payload does not decode into %T: %w", j.Type, tj.Payload, err))
			}
		}
		return h.Handle(ctx, tj)
	})
}

// HandleOption sets a default of one job type, given to Worker.Handle,
// HandleTyped or HandleFunc.
type HandleOption func(*typeDefaults)

// typeDefaults are a job type's own defaults; zero: none, Config's apply.
type typeDefaults struct {
	timeout     time.Duration
	maxAttempts int
	retryDelay  func(attempt int, err error) time.Duration
}

// TypeTimeout bounds one attempt of the type's jobs whose envelope sets no
// timeout of its own. The envelope's timeout wins over it, and it wins over
// Config.Timeout (--timeout). 0 unsets it; a negative d panics, as a
// mistake in code (registration happens before Run).
func TypeTimeout(d time.Duration) HandleOption {
	if d < 0 {
		panic(fmt.Sprintf("worker.TypeTimeout(%s): must not be negative", d))
	}
	return func(o *typeDefaults) { o.timeout = d }
}

// TypeMaxAttempts is how often the type's jobs whose envelope sets no
// max_attempts of their own are tried before they go to the dead set. The
// envelope's max_attempts wins over it, and it wins over Config.MaxAttempts
// (--max-attempts). 0 unsets it; a negative n panics.
func TypeMaxAttempts(n int) HandleOption {
	if n < 0 {
		panic(fmt.Sprintf("worker.TypeMaxAttempts(%d): must not be negative", n))
	}
	return func(o *typeDefaults) { o.maxAttempts = n }
}
