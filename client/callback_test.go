package client_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/callback"
)

func TestVerifyCallback(t *testing.T) {
	body := []byte(`{"group":"g","done":2}`)
	sig, err := callback.Sign([][]byte{[]byte("s3cret")}, time.Now(), func() io.Reader { return bytes.NewReader(body) })
	if err != nil {
		t.Fatal(err)
	}
	req := func(sig string) *http.Request {
		r := httptest.NewRequest("POST", "/done", bytes.NewReader(body))
		r.Header.Set(client.SignatureHeader, sig)
		return r
	}
	got, err := client.VerifyCallback(req(sig), "other", "s3cret")
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("%q %v", got, err)
	}
	if _, err := client.VerifyCallback(req(sig), "other"); !errors.Is(err, client.ErrBadSignature) {
		t.Errorf("a wrong secret: %v", err)
	}
	if _, err := client.VerifyCallback(req(""), "s3cret"); !errors.Is(err, client.ErrNoSignature) {
		t.Errorf("unsigned: %v", err)
	}
}
