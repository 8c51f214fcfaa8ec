package client

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// Error is a gate's error answer that the client returns rather than
// retries: a 4xx (fix the request), a 502, or a 503 or 504 still failing
// after RetryPolicy.MaxAttempts sends. Get it with errors.As.
type Error struct {
	// Status is the HTTP status, e.g. 400, 401, 403, 404, 413, 503, 504.
	Status int
	// Message is the gate's message, which says what to fix.
	Message string
	// Field names the envelope field at fault (400), when the gate knows.
	Field string
	// Line and Column locate a JSON syntax error in the body (400).
	Line, Column int
	// IDs are the jobs whose fate is unknown after a 504 (or, for a
	// group, the group's id): resent with the same ids, they are queued
	// once.
	IDs []string
	// Attempts is how many times the request was sent.
	Attempts int
}

func newError(status int, eb *errorBody, attempts int) *Error {
	return &Error{Status: status, Message: eb.Error, Field: eb.Field, Line: eb.Line, Column: eb.Column, IDs: eb.IDs, Attempts: attempts}
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice gate: %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d sends)", e.Attempts)
	}
	return b.String()
}

// Temporary reports whether sending the same request later may succeed:
// Kafka was unreachable (503) or slow (504).
func (e *Error) Temporary() bool {
	return e.Status == http.StatusServiceUnavailable || e.Status == http.StatusGatewayTimeout
}

// BatchError is EnqueueBatch's error when the gate took some jobs and not
// others (or none): Rejected lists those it did not take, with their
// reasons. The jobs not listed are stored.
type BatchError struct {
	// Rejected are the results of the jobs not accepted, in batch order;
	// each has Err set.
	Rejected []ItemResult
	// Total is the number of jobs in the batch.
	Total int
}

func (e *BatchError) Error() string {
	first := e.Rejected[0]
	return fmt.Sprintf("sluice gate: %d of %d jobs not accepted; job %d: %v", len(e.Rejected), e.Total, first.Index, first.Err)
}

// TLSError is a TLS failure with the gate that resending will not mend:
// its certificate is not signed by a CA the client trusts (set
// Config.CAFile or Config.TLS.RootCAs), is for another name, or the gate
// asks for a client certificate (set Config.CertFile and Config.KeyFile).
// Its Fix names the setting; the client returns it after one send. Get it
// with errors.As.
type TLSError = tlsfiles.HandshakeError
