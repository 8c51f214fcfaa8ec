package client_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/callback"
)

var (
	secret = strings.Repeat("s", 32)
	other  = strings.Repeat("o", 32)
)

func signedRequest(t *testing.T, body []byte, group, attempt string, v1 bool) *http.Request {
	t.Helper()
	sig, err := callback.Sign([][]byte{[]byte(secret)}, time.Now(), callback.Signed{Group: group, Attempt: attempt}, v1,
		func() io.Reader { return bytes.NewReader(body) })
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/done", bytes.NewReader(body))
	r.Header.Set(client.SignatureHeader, sig)
	r.Header.Set("Sluice-Group", group)
	r.Header.Set("Sluice-Attempt", attempt)
	return r
}

func TestVerifyCallback(t *testing.T) {
	body := []byte(`{"group":"g","done":2}`)
	got, err := client.VerifyCallback(signedRequest(t, body, "g", "1", true), other, secret)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("%q %v", got, err)
	}
	if _, err := client.VerifyCallback(signedRequest(t, body, "g", "1", false), other); !errors.Is(err, client.ErrBadSignature) {
		t.Errorf("a wrong secret: %v", err)
	}
	unsigned := signedRequest(t, body, "g", "1", false)
	unsigned.Header.Del(client.SignatureHeader)
	if _, err := client.VerifyCallback(unsigned, secret); !errors.Is(err, client.ErrNoSignature) {
		t.Errorf("unsigned: %v", err)
	}
	// The group header moved: the v2 signature no longer matches.
	moved := signedRequest(t, body, "g", "1", true)
	moved.Header.Set("Sluice-Group", "another")
	if _, err := client.VerifyCallback(moved, secret); !errors.Is(err, client.ErrBadSignature) {
		t.Errorf("another group's header: %v", err)
	}
}

// TestVerifyCallbackRefusesAnEmptySecret: an unset secret (the documented
// example reads an environment variable) or one under 32 bytes fails with
// ErrShortSecret, whose text says what to give, even on a callback whose
// header a forger made with that same empty secret.
func TestVerifyCallbackRefusesAnEmptySecret(t *testing.T) {
	body := []byte(`{}`)
	// What a forger knowing the receiver's secret is empty would send:
	// a v1 value under the empty key (Sign refuses to make one).
	ts := time.Now().Unix()
	forged := httptest.NewRequest("POST", "/done", bytes.NewReader(body))
	forged.Header.Set(client.SignatureHeader, forgedV1(ts, body))
	for _, secrets := range [][]string{{""}, nil, {"short"}, {secret, ""}} {
		_, err := client.VerifyCallback(forged, secrets...)
		if !errors.Is(err, client.ErrShortSecret) || !strings.Contains(err.Error(), "at least 32") {
			t.Errorf("secrets %q: %v, want ErrShortSecret", secrets, err)
		}
	}
}

// TestVerifyCallbackV2RefusesV1Only: past the transition, a callback
// signed v1 only (or whose v2 was stripped) is refused.
func TestVerifyCallbackV2RefusesV1Only(t *testing.T) {
	body := []byte(`{"group":"g"}`)
	r := signedRequest(t, body, "g", "1", true)
	var v1 []string
	for _, p := range strings.Split(r.Header.Get(client.SignatureHeader), ",") {
		if !strings.HasPrefix(p, "v2=") {
			v1 = append(v1, p)
		}
	}
	r.Header.Set(client.SignatureHeader, strings.Join(v1, ","))
	if _, err := client.VerifyCallbackV2(r, secret); !errors.Is(err, client.ErrNoV2) {
		t.Errorf("v1 only: %v, want ErrNoV2", err)
	}
	if _, err := client.VerifyCallbackV2(signedRequest(t, body, "g", "1", false), secret); err != nil {
		t.Errorf("v2: %v", err)
	}
}
