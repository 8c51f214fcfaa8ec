package client

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/callback"
)

// SignatureHeader is the header a signed group callback carries (the
// coordinator's --callback-secret-file): "t=<unix seconds>,v1=<hex>", each
// v1 an HMAC-SHA256 of "<t>.<body>" under one of the coordinator's
// secrets.
const SignatureHeader = callback.HeaderSignature

// Errors of VerifyCallback, for errors.Is.
var (
	ErrNoSignature  = callback.ErrNoSignature
	ErrBadSignature = callback.ErrBadSignature
	ErrStale        = callback.ErrStale
)

// MaxCallbackBody bounds what VerifyCallback reads of a callback's body.
const MaxCallbackBody = 256 << 20

// VerifyCallback reads a group callback's body from r and checks its
// signature against secrets, the ones your receiver shares with the
// coordinator (either of the two during a rotation). It refuses a
// signature more than 5 minutes old or ahead (a replay, or clocks apart).
// On success it returns the body, to decode as the callback's JSON; on
// failure, answer 401 and do not act on it.
func VerifyCallback(r *http.Request, secrets ...string) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxCallbackBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading the callback: %w", err)
	}
	if len(body) > MaxCallbackBody {
		return nil, fmt.Errorf("callback body over %d bytes", MaxCallbackBody)
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = []byte(s)
	}
	if err := callback.Verify(r.Header.Get(SignatureHeader), body, keys, time.Now(), 0); err != nil {
		return nil, err
	}
	return body, nil
}
