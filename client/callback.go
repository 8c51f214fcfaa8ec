package client

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/callback"
	"github.com/sluicehq/sluice/internal/job"
)

// SignatureHeader is the header a signed group callback carries (the
// coordinator's --callback-secret-file): "t=<unix seconds>,v2=<hex>[,v1=<hex>]",
// each v2 an HMAC-SHA256 of "v2\n<t>\n<Sluice-Group>\n<Sluice-Attempt>\n<body>"
// under one of the coordinator's secrets, each v1 (sent during the
// transition) one of "<t>.<body>". docs/secure/callbacks.md#signatures
// holds the contract; internal/callback implements it.
const SignatureHeader = callback.HeaderSignature

// MinSecretLen is the shortest secret VerifyCallback takes: 32 bytes.
const MinSecretLen = callback.MinSecretLen

// Errors of VerifyCallback, for errors.Is.
var (
	ErrNoSignature  = callback.ErrNoSignature
	ErrBadSignature = callback.ErrBadSignature
	ErrStale        = callback.ErrStale
	// ErrShortSecret: no secret given, or one shorter than MinSecretLen
	// (an unset environment variable reads as ""): a configuration error
	// of the receiver, whatever the callback.
	ErrShortSecret = callback.ErrShortSecret
	// ErrNoV2: VerifyCallbackV2 got a callback signed v1 only.
	ErrNoV2 = callback.ErrNoV2
)

// MaxCallbackBody bounds what VerifyCallback reads of a callback's body.
const MaxCallbackBody = 256 << 20

// VerifyCallback reads a group callback's body from r and checks its
// signature, which covers the body, the Sluice-Group and Sluice-Attempt
// headers and the time, against secrets: the ones your receiver shares
// with the coordinator (either of the two during a rotation), each at
// least MinSecretLen bytes (ErrShortSecret otherwise, before anything is
// read). It refuses a signature more than 5 minutes old or ahead (a
// replay, or clocks apart). On success it returns the body, to decode as
// the callback's JSON; on failure, answer 401 and do not act on it.
//
// During the transition from v1 signatures (which cover the body alone)
// it also accepts a callback signed v1 only, from a coordinator older than
// v2; once every coordinator signs v2, use VerifyCallbackV2.
func VerifyCallback(r *http.Request, secrets ...string) ([]byte, error) {
	return verify(r, callback.VerifyOptions{}, secrets)
}

// VerifyCallbackV2 is VerifyCallback without the transition: a callback
// without a v2 signature is refused (ErrNoV2), so a v1 value alone, its
// v2 stripped, cannot vouch for a changed group or attempt.
func VerifyCallbackV2(r *http.Request, secrets ...string) ([]byte, error) {
	return verify(r, callback.VerifyOptions{V2Only: true}, secrets)
}

func verify(r *http.Request, opts callback.VerifyOptions, secrets []string) ([]byte, error) {
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = []byte(s)
	}
	// Checked first: a receiver whose secret is unset must learn it from
	// the first callback, not after reading a body.
	if err := callback.CheckSecrets(keys); err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxCallbackBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading the callback: %w", err)
	}
	if len(body) > MaxCallbackBody {
		return nil, fmt.Errorf("callback body over %d bytes", MaxCallbackBody)
	}
	signed := callback.Signed{Group: r.Header.Get(job.HeaderGroup), Attempt: r.Header.Get(job.HeaderAttempt)}
	if err := callback.Verify(r.Header.Get(SignatureHeader), body, signed, keys, time.Now(), opts); err != nil {
		return nil, err
	}
	return body, nil
}
