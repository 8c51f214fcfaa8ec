package callback

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/secretfile"
)

// HeaderSignature carries a callback's signatures, as Stripe's and
// GitHub's webhooks do: "t=<unix seconds>,v2=<hex>[,v1=<hex>]...", one
// value per scheme and secret. Two secrets are configured during a
// rotation: a receiver accepts the callback if a value matches a secret it
// knows.
//
// The key before each value is the scheme's version, so that a receiver
// tells the schemes apart (docs/secure/callbacks.md#signatures):
//
//	v2: HMAC-SHA256 of "v2\n<t>\n<Sluice-Group>\n<Sluice-Attempt>\n<body>"
//	v1: HMAC-SHA256 of "<t>.<body>" (covers neither the group nor the attempt)
//
// The group and the attempt come from their headers, which cannot hold a
// new line: the v2 string has one reading only. v1 is sent beside v2
// while Config.CallbackSignV1 is on, for receivers that verify v1 only;
// Verify prefers v2 whenever the header has one.
const HeaderSignature = "Sluice-Signature"

// DefaultTolerance is how old a signature's timestamp may be before Verify
// refuses it as a replay.
const DefaultTolerance = 5 * time.Minute

// MinSecretLen is the shortest secret Sign, Verify and ReadSecrets take:
// 32 bytes, the HMAC-SHA256 block's half, out of reach of a guess.
const MinSecretLen = 32

// Errors of Verify.
var (
	ErrNoSignature  = errors.New("callback signature: missing or malformed " + HeaderSignature + " header")
	ErrBadSignature = errors.New("callback signature: no value matches a known secret")
	ErrStale        = errors.New("callback signature: timestamp outside the tolerance (a replay, or clocks apart)")
	ErrNoV2         = errors.New("callback signature: no v2 value, and this receiver takes v2 only (the coordinator signs v1 alone, or a v2 was stripped)")
	ErrShortSecret  = fmt.Errorf("callback secret: shorter than %d bytes, or none given (give the receiver the coordinator's --callback-secret-file secret, at least %d bytes; `openssl rand -hex 32` makes one)", MinSecretLen, MinSecretLen)
)

// CheckSecrets refuses no secret and any shorter than MinSecretLen
// (errors.Is ErrShortSecret). Its error names the secret by its place,
// never its value.
func CheckSecrets(secrets [][]byte) error {
	if len(secrets) == 0 {
		return ErrShortSecret
	}
	for i, s := range secrets {
		if len(s) < MinSecretLen {
			return fmt.Errorf("secret %d of %d is %d bytes: %w", i+1, len(secrets), len(s), ErrShortSecret)
		}
	}
	return nil
}

// ReadSecrets reads a secrets file: one secret per line, blank lines and
// lines starting with '#' skipped, at most two (the current one and the
// one being rotated in or out), each at least MinSecretLen bytes. The file
// must be readable by its owner only (internal/secretfile). Its errors
// never show a secret.
func ReadSecrets(file string) ([][]byte, error) {
	b, err := secretfile.Read(file)
	if err != nil {
		return nil, fmt.Errorf("callback secrets: %w", err)
	}
	var secrets [][]byte
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		secrets = append(secrets, []byte(line))
	}
	switch {
	case len(secrets) == 0:
		return nil, fmt.Errorf("callback secrets file %s holds no secret", file)
	case len(secrets) > 2:
		return nil, fmt.Errorf("callback secrets file %s holds %d secrets: at most 2 (the current one and the one being rotated)", file, len(secrets))
	}
	for i, s := range secrets {
		if len(s) < MinSecretLen {
			return nil, fmt.Errorf("callback secrets file %s: secret %d is %d bytes, want at least %d (`openssl rand -hex 32` makes one)", file, i+1, len(s), MinSecretLen)
		}
	}
	return secrets, nil
}

// Signed is what a signature covers besides the body: the values of the
// callback's Sluice-Group and Sluice-Attempt headers.
type Signed struct {
	Group   string
	Attempt string
}

func macV1(secret []byte, ts string, body io.Reader) ([]byte, error) {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	if _, err := io.Copy(h, body); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

func macV2(secret []byte, ts string, s Signed, body io.Reader) ([]byte, error) {
	h := hmac.New(sha256.New, secret)
	io.WriteString(h, "v2\n"+ts+"\n"+s.Group+"\n"+s.Attempt+"\n")
	if _, err := io.Copy(h, body); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// Sign returns the HeaderSignature value for a callback at time at: a v2
// per secret, and a v1 per secret too when v1 is set (the transition). body
// is read once per value: open gives a fresh reader.
func Sign(secrets [][]byte, at time.Time, s Signed, v1 bool, open func() io.Reader) (string, error) {
	if err := CheckSecrets(secrets); err != nil {
		return "", err
	}
	if strings.ContainsAny(s.Group+s.Attempt, "\r\n") {
		return "", errors.New("callback signature: the group or attempt holds a new line")
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	parts := []string{"t=" + ts}
	for _, k := range secrets {
		v, err := macV2(k, ts, s, open())
		if err != nil {
			return "", err
		}
		parts = append(parts, "v2="+hex.EncodeToString(v))
	}
	if v1 {
		for _, k := range secrets {
			v, err := macV1(k, ts, open())
			if err != nil {
				return "", err
			}
			parts = append(parts, "v1="+hex.EncodeToString(v))
		}
	}
	return strings.Join(parts, ","), nil
}

// VerifyOptions tunes Verify.
type VerifyOptions struct {
	// Tolerance is how far the timestamp may be from now. Default
	// DefaultTolerance.
	Tolerance time.Duration
	// V2Only refuses a header without a v2 value (ErrNoV2): for a
	// receiver once every coordinator it hears from signs v2, so that a
	// v1 value left alone (its v2 stripped) cannot vouch for a changed
	// group or attempt. Default false: the transition.
	V2Only bool
}

// Verify checks a HeaderSignature value against the body, the group and
// attempt headers (s) and the secrets the receiver knows (each at least
// MinSecretLen bytes: ErrShortSecret otherwise), refusing a timestamp
// outside the tolerance. A header with v2 values is checked by them only
// (its v1 values are ignored); one with v1 values only is checked by v1,
// unless opts.V2Only.
func Verify(header string, body []byte, s Signed, secrets [][]byte, now time.Time, opts VerifyOptions) error {
	if err := CheckSecrets(secrets); err != nil {
		return err
	}
	tolerance := opts.Tolerance
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	var ts string
	var v1, v2 [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrNoSignature
		}
		b, err := hex.DecodeString(v)
		switch {
		case k == "t":
			ts = v
		case err != nil:
		case k == "v1":
			v1 = append(v1, b)
		case k == "v2":
			v2 = append(v2, b)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(v1)+len(v2) == 0 {
		return ErrNoSignature
	}
	if len(v2) == 0 && opts.V2Only {
		return ErrNoV2
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	for _, k := range secrets {
		var want []byte
		sigs := v2
		if len(v2) > 0 {
			want, _ = macV2(k, ts, s, bytes.NewReader(body))
		} else {
			want, _ = macV1(k, ts, bytes.NewReader(body))
			sigs = v1
		}
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return nil
			}
		}
	}
	return ErrBadSignature
}
