package callback

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// HeaderSignature carries a callback's signatures, as Stripe's and
// GitHub's webhooks do: "t=<unix seconds>,v1=<hex>[,v1=<hex>...]", each v1
// an HMAC-SHA256, under one of the coordinator's secrets, of
// "<t>.<body>". Two v1 values are sent while two secrets are configured
// (a rotation): a receiver accepts the callback if any matches a secret it
// knows.
const HeaderSignature = "Sluice-Signature"

// DefaultTolerance is how old a signature's timestamp may be before Verify
// refuses it as a replay.
const DefaultTolerance = 5 * time.Minute

// ReadSecrets reads a secrets file: one secret per line, blank lines and
// lines starting with '#' skipped, at most two (the current one and the
// one being rotated in or out). Its errors never show a secret.
func ReadSecrets(file string) ([][]byte, error) {
	b, err := os.ReadFile(file)
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
	return secrets, nil
}

func mac(secret []byte, ts string, body io.Reader) (string, error) {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	if _, err := io.Copy(h, body); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Sign returns the HeaderSignature value for body at time at, a v1 per
// secret. body is read once per secret: open gives a fresh reader.
func Sign(secrets [][]byte, at time.Time, open func() io.Reader) (string, error) {
	ts := strconv.FormatInt(at.Unix(), 10)
	parts := []string{"t=" + ts}
	for _, s := range secrets {
		v, err := mac(s, ts, open())
		if err != nil {
			return "", err
		}
		parts = append(parts, "v1="+v)
	}
	return strings.Join(parts, ","), nil
}

// Errors of Verify.
var (
	ErrNoSignature  = errors.New("callback signature: missing or malformed " + HeaderSignature + " header")
	ErrBadSignature = errors.New("callback signature: no v1 value matches a known secret")
	ErrStale        = errors.New("callback signature: timestamp outside the tolerance (a replay, or clocks apart)")
)

// Verify checks a HeaderSignature value against body and the secrets the
// receiver knows, refusing a timestamp more than tolerance away from now
// (0: DefaultTolerance).
func Verify(header string, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrNoSignature
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrNoSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	for _, s := range secrets {
		h := hmac.New(sha256.New, s)
		h.Write([]byte(ts))
		h.Write([]byte{'.'})
		h.Write(body)
		want := h.Sum(nil)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return nil
			}
		}
	}
	return ErrBadSignature
}
