package relay_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tlsfiles"
	"github.com/sluicehq/sluice/relay"
)

// A relay writes into a TLS-only Redis as an ACL user whose password is in
// a file; with a wrong password it fails to start with an error that names
// the flags to fix, and neither the error nor its log shows the password.
func TestRelayOverTLSAsAnACLUser(t *testing.T) {
	certs := testenv.NewCerts(t)
	b := newBed(t, testenv.WithTLS(certs), testenv.WithUser("sluice", "s3cret-pw", "~sluice:* &* +@all"))
	pwFile := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pwFile, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secure := func(c *relay.Config) {
		c.RedisUser, c.RedisPassword, c.RedisTLS = "sluice", cli.Secret{File: pwFile}, tlsfiles.Client{CAFile: certs.CAFile}
	}
	b.start(t, "r1", secure)
	b.produce(t, 0, 50)
	b.waitRelayed(t, 50, 20*time.Second)

	var logs bytes.Buffer
	cfg := b.config(func(c *relay.Config) { secure(c); c.RedisPassword = cli.Secret{Value: "wr0ng-pw"} })
	_, err := relay.New(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err == nil {
		t.Fatal("relay.New with a wrong password: no error")
	}
	for _, want := range []string{"WRONGPASS", "--redis-user", "--redis-password"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error()+logs.String()+cfg.RedisPassword.String(), "wr0ng-pw") {
		t.Errorf("the password shows: error %q, log %q", err, logs.String())
	}
}
