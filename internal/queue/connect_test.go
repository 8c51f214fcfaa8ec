package queue

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// securePool is a pool of one partition at loc (as a part builds it from
// its StageRedis), closed with the test.
func securePool(t *testing.T, loc StageRedis) *Pool {
	t.Helper()
	if err := loc.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(loc.PoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// A pool over TLS, logged in as an ACL user whose password is in a file,
// enqueues, claims and acks; a rotated password file is read by the next
// connection.
func TestPoolOverTLSAsAnACLUser(t *testing.T) {
	certs := testenv.NewCerts(t)
	r := testenv.Redis(t, testenv.WithTLS(certs), testenv.WithUser("sluice", "s3cret", "~sluice:* &* +@all"))
	ctx := context.Background()
	pwFile := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	loc := StageRedis{Stage: "test", Partitions: 2, RedisAddr: r.Addr(), RedisUser: "sluice",
		RedisPassword: cli.Secret{File: pwFile}, RedisTLS: tlsfiles.Client{CAFile: certs.CAFile}}
	p := securePool(t, loc)
	if err := p.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if who := p.Client(0).Do(ctx, "ACL", "WHOAMI").Val(); who != "sluice" {
		t.Fatalf("logged in as %v, want sluice", who)
	}
	items := positioned(0, 0, item("j1", ""), item("j2", ""))
	for i, res := range enqueueOK(t, p, 1, items, now) {
		if res.Outcome != Queued {
			t.Fatalf("item %d: %v %v", i, res.Outcome, res.Err)
		}
	}
	acked := 0
	for part := range 2 {
		q := Queue{Topic: "jobs", Part: part}
		claimed, err := p.Claim(ctx, q, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claimed {
			ok, err := p.Ack(ctx, q, Done{Job: c}, now, 0)
			if err != nil || !ok {
				t.Fatalf("ack %s: %v %v", c.ID, ok, err)
			}
			acked++
		}
	}
	if acked != 2 {
		t.Fatalf("acked %d jobs, want 2", acked)
	}

	// The password rotates: the user gets a new one, the file too; a new
	// connection logs in with it, without a new pool.
	if err := r.Client().Do(ctx, "ACL", "SETUSER", "sluice", "resetpass", ">n3w").Err(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pwFile, []byte("n3w"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Client().Do(ctx, "CLIENT", "KILL", "USER", "sluice").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the pool to log in with the rotated password", func() bool { return p.Ping(ctx) == nil })
}

// A wrong password, a user without the permission to load scripts, an
// untrusted CA and plain TCP to a TLS port each fail the first ping with
// an error that says what to fix, and none shows the password.
func TestPoolLoginAndTLSErrorsNameTheFix(t *testing.T) {
	certs := testenv.NewCerts(t)
	r := testenv.Redis(t, testenv.WithTLS(certs),
		testenv.WithUser("sluice", "s3cret", "~sluice:* &* +@all"),
		testenv.WithUser("reader", "r3ader", "~sluice:* &* +@read +ping +hello +client"))
	trusted := tlsfiles.Client{CAFile: certs.CAFile}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		loc  StageRedis
		ping bool // the error comes from LoadScripts, not Ping
		want []string
	}{
		{"wrong password", StageRedis{RedisAddr: r.Addr(), RedisUser: "sluice", RedisPassword: cli.Secret{Value: "wr0ng-pw"}, RedisTLS: trusted},
			true, []string{"WRONGPASS", "--redis-user", "--redis-password"}},
		{"missing permission", StageRedis{RedisAddr: r.Addr(), RedisUser: "reader", RedisPassword: cli.Secret{Value: "r3ader"}, RedisTLS: trusted},
			false, []string{"NOPERM", "ACL rule", "~sluice:* &* +@all"}},
		{"untrusted CA", StageRedis{RedisAddr: r.Addr(), RedisUser: "sluice", RedisPassword: cli.Secret{Value: "s3cret"}, RedisTLS: tlsfiles.Client{CAFile: certs.OtherCAFile}},
			true, []string{"not signed by a trusted CA", "--redis-tls-ca-file"}},
		{"plain TCP to a TLS port", StageRedis{RedisAddr: r.Addr(), RedisUser: "sluice", RedisPassword: cli.Secret{Value: "s3cret"}},
			true, []string{"closed the connection", "--redis-tls"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.loc.Stage, c.loc.Partitions = "test", 1
			p := securePool(t, c.loc)
			var err error
			if c.ping {
				err = p.Ping(ctx)
			} else {
				if err = p.Ping(ctx); err != nil {
					t.Fatalf("Ping: %v (the user may ping)", err)
				}
				err = p.LoadScripts(ctx)
			}
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if pw, _ := c.loc.RedisPassword.Read(); pw != "" && strings.Contains(err.Error(), pw) {
				t.Errorf("error %q shows the password", err)
			}
			// A closed connection may be a restart too: not surely
			// misconfigured.
			if want := !strings.HasPrefix(c.name, "plain"); Misconfigured(err) != want {
				t.Errorf("Misconfigured(%q) = %v", err, !want)
			}
		})
	}
}

// The new flags are on every StageRedis, with their defaults, and a
// Sentinel without a master name is an error naming the field.
func TestLocationSecureFlags(t *testing.T) {
	l := DefaultStageRedis()
	fs := newFlagSet()
	l.RegisterFlags(fs)
	for _, name := range []string{"redis-user", "redis-password", "redis-password-file", "redis-tls", "redis-tls-ca-file",
		"redis-tls-cert-file", "redis-tls-key-file", "redis-tls-server-name", "redis-sentinel-addrs", "redis-sentinel-master",
		"redis-sentinel-user", "redis-sentinel-password", "redis-sentinel-password-file"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no --%s", name)
		}
	}
	if err := fs.Parse([]string{"--redis-sentinel-addrs", "127.0.0.1:26379,127.0.0.1:26380", "--redis-password", "pw"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Validate(); err == nil || !strings.HasPrefix(err.Error(), "SentinelMaster: ") {
		t.Errorf("Validate() = %v, want SentinelMaster: ...", err)
	}
	if strings.Contains(fs.Lookup("redis-password").Value.String(), "pw") {
		t.Error("--redis-password shows its value")
	}
	l.SentinelMaster = "m"
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	pc := l.PoolConfig()
	if pc.server(0) != "m" || len(pc.Connect.SentinelAddrs) != 2 {
		t.Errorf("PoolConfig() = %+v", pc)
	}
	l.RedisTLS.CAFile = filepath.Join(t.TempDir(), "missing.pem")
	if err := l.Validate(); err == nil || !strings.HasPrefix(err.Error(), "RedisTLS: ") {
		t.Errorf("Validate() = %v, want RedisTLS: ...", err)
	}
}

func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// WaitReplicas reports a Redis without enough replicas, naming the count,
// and passes once a replica has the writes.
func TestWaitReplicas(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 2, r.Addr(), nil)
	ctx := context.Background()
	err := p.WaitReplicas(ctx, []Queue{jq(0), jq(1)}, 1, 50*time.Millisecond)
	var behind *ReplicasBehindError
	if !errors.As(err, &behind) || behind.Acked != 0 || behind.Want != 1 {
		t.Fatalf("WaitReplicas with no replica = %v, want a ReplicasBehindError 0 of 1", err)
	}
	if err := p.WaitReplicas(ctx, []Queue{jq(0)}, 0, 50*time.Millisecond); err != nil {
		t.Fatalf("WaitReplicas for 0 replicas = %v", err)
	}
}
