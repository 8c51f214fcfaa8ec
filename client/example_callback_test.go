package client_test

import (
	"log"
	"net/http"
	"os"

	"github.com/sluicehq/sluice/client"
)

// A receiver of group callbacks that acts only on callbacks signed with
// the secret it shares with the coordinator (--callback-secret-file). An
// unset variable is no secret: VerifyCallback then fails every callback
// with ErrShortSecret, and the receiver says so at start.
func ExampleVerifyCallback() {
	secret := os.Getenv("SLUICE_CALLBACK_SECRET")
	if len(secret) < client.MinSecretLen {
		log.Fatalf("SLUICE_CALLBACK_SECRET: %v", client.ErrShortSecret)
	}
	http.HandleFunc("/sluice/done", func(w http.ResponseWriter, r *http.Request) {
		body, err := client.VerifyCallback(r, secret)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		// The group id (header Sluice-Group) is the idempotency key:
		// delivery is at least once.
		log.Printf("group %s done: %d bytes of results", r.Header.Get("Sluice-Group"), len(body))
	})
}
