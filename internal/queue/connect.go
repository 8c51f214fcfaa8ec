package queue

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// Connect is how a pool's clients reach Redis and log in: an ACL user and
// its password, TLS, and Sentinel. The zero value is plain TCP to the
// addresses of PoolConfig, as the default user without a password.
type Connect struct {
	// User is the Redis ACL user. Default "": the default user (with
	// Password alone, AUTH <password>).
	User string
	// Password is the user's password, read through Secret.Read on every
	// new connection, so a rotated password file is picked up as clients
	// reconnect. Default: none.
	Password cli.Secret
	// TLS dials Redis (and the Sentinels) over TLS. Default: plain TCP.
	TLS tlsfiles.Client
	// SentinelAddrs, when set, finds each partition's master through
	// these Sentinels (host:port) and follows it across failovers:
	// PoolConfig.Addr is then not used; the partitions not in
	// PartitionAddrs are on SentinelMaster, and PartitionAddrs' values
	// are master names. Default: none (no Sentinel).
	SentinelAddrs []string
	// SentinelMaster is the master name the Sentinels monitor (their
	// "sentinel monitor <name> ..."). Required with SentinelAddrs.
	// Default "".
	SentinelMaster string
	// SentinelUser and SentinelPassword log in to the Sentinels
	// themselves. The password is read once, when the pool is made.
	// Default: none.
	SentinelUser     string
	SentinelPassword cli.Secret
}

// Sentinel reports whether the pool finds its masters through Sentinel.
func (c Connect) Sentinel() bool { return len(c.SentinelAddrs) > 0 }

// server is the name of the Redis of partition part: its host:port, or,
// through Sentinel, its master's name.
func (cfg PoolConfig) server(part int) string {
	if a, ok := cfg.PartitionAddrs[part]; ok {
		return a
	}
	if cfg.Connect.Sentinel() {
		return cfg.Connect.SentinelMaster
	}
	return cfg.Addr
}

// serverLabel is how errors and metrics name server: a master found
// through Sentinel says so.
func (cfg PoolConfig) serverLabel(server string) string {
	if cfg.Connect.Sentinel() {
		return "sentinel master " + server
	}
	return server
}

// newClient makes the client of one Redis server (as server names it).
// Through Sentinel it is a failover client: it asks the Sentinels for the
// master and, when they switch it, drops its connections and dials the new
// one.
func (cfg PoolConfig) newClient(server string, tc *tls.Config, sentinelPassword string) *redis.Client {
	cn := cfg.Connect
	opts := &redis.Options{
		Addr: server,
		// Retries are the caller's: a script retried by the client
		// behind our back could run twice. (Ours are idempotent, but
		// the caller must also see the failure to back off and log it.)
		MaxRetries: -1,
		TLSConfig:  tc,
	}
	opts.CredentialsProviderContext = cn.credentials()
	if cfg.Options != nil {
		cfg.Options(opts)
	}
	if !cn.Sentinel() {
		return redis.NewClient(opts)
	}
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:       server,
		SentinelAddrs:    cn.SentinelAddrs,
		SentinelUsername: cn.SentinelUser,
		SentinelPassword: sentinelPassword,

		CredentialsProviderContext: opts.CredentialsProviderContext,
		Username:                   opts.Username,
		Password:                   opts.Password,
		TLSConfig:                  opts.TLSConfig,
		DisableIdentity:            opts.DisableIdentity,

		MaxRetries:         opts.MaxRetries,
		MinRetryBackoff:    opts.MinRetryBackoff,
		MaxRetryBackoff:    opts.MaxRetryBackoff,
		DialTimeout:        opts.DialTimeout,
		DialerRetries:      opts.DialerRetries,
		DialerRetryTimeout: opts.DialerRetryTimeout,
		ReadTimeout:        opts.ReadTimeout,
		WriteTimeout:       opts.WriteTimeout,
		PoolSize:           opts.PoolSize,
		PoolTimeout:        opts.PoolTimeout,
		MinIdleConns:       opts.MinIdleConns,
		MaxIdleConns:       opts.MaxIdleConns,
		MaxActiveConns:     opts.MaxActiveConns,
		ConnMaxIdleTime:    opts.ConnMaxIdleTime,
		ConnMaxLifetime:    opts.ConnMaxLifetime,
	})
}

// credentials is the login of every new connection, nil for none.
func (cn Connect) credentials() func(context.Context) (string, string, error) {
	if cn.User == "" && !cn.Password.Set() {
		return nil
	}
	user, secret := cn.User, cn.Password
	// Read on every dial: a rotated password file needs no restart.
	// Its error names the file, never the content.
	return func(context.Context) (string, string, error) {
		pw, err := secret.Read()
		if err != nil {
			return "", "", fmt.Errorf("Redis password (--redis-password-file): %w", err)
		}
		return user, pw, nil
	}
}

// settings checks cn and loads what a pool's clients share: the
// TLS config (its errors name the file) and the Sentinels' password.
func (cn Connect) settings() (*tls.Config, string, error) {
	if cn.Sentinel() && cn.SentinelMaster == "" {
		return nil, "", errors.New("queue: Sentinel without a master name: set --redis-sentinel-master (Config.SentinelMaster)")
	}
	tc, err := cn.TLS.Config()
	if err != nil {
		return nil, "", fmt.Errorf("queue: Redis TLS (--redis-tls-*): %w", err)
	}
	if _, err := cn.Password.Read(); err != nil {
		return nil, "", fmt.Errorf("queue: Redis password (--redis-password-file): %w", err)
	}
	pw, err := cn.SentinelPassword.Read()
	if err != nil {
		return nil, "", fmt.Errorf("queue: Sentinel password (--redis-sentinel-password-file): %w", err)
	}
	return tc, pw, nil
}

// explain turns an error from reaching or logging in to the Redis named
// server into one that says what to fix: the login (WRONGPASS, NOAUTH), an
// ACL permission (NOPERM), the TLS trust or name. Other errors are only
// prefixed with the server. Redis never puts the password in these
// replies, and neither does explain.
func explain(server string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var (
		unknownCA *x509.UnknownAuthorityError
		badName   x509.HostnameError
		verify    *tls.CertificateVerificationError
		notTLS    tls.RecordHeaderError
	)
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"):
		return fmt.Errorf("Redis %s refused the login: %w: check --redis-user and --redis-password / --redis-password-file (Config.RedisUser, Config.RedisPassword) against the ACL user", server, err)
	case strings.HasPrefix(msg, "NOAUTH"):
		return fmt.Errorf("Redis %s asks for a password: %w: set --redis-password-file (Config.RedisPassword), and --redis-user for an ACL user", server, err)
	case strings.HasPrefix(msg, "NOPERM"):
		return fmt.Errorf("Redis %s: the ACL user lacks a permission: %w: grant it in the user's ACL rule (sluice needs ~sluice:* &* +@all; docs/secure/redis.md)", server, err)
	case errors.As(err, &unknownCA) || strings.Contains(msg, "certificate signed by unknown authority"):
		return fmt.Errorf("Redis %s: its TLS certificate is not signed by a trusted CA: %w: give the CA that signs it with --redis-tls-ca-file (Config.RedisTLS.CAFile)", server, err)
	case errors.As(err, &badName) || strings.Contains(msg, "x509: certificate is valid for"):
		return fmt.Errorf("Redis %s: its TLS certificate is for another name: %w: set --redis-tls-server-name (Config.RedisTLS.ServerName) to a name it holds", server, err)
	case errors.As(err, &verify) || strings.Contains(msg, "x509:"):
		return fmt.Errorf("Redis %s: its TLS certificate does not verify: %w: check --redis-tls-ca-file (Config.RedisTLS.CAFile)", server, err)
	case errors.As(err, &notTLS) || strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Errorf("Redis %s does not speak TLS on this port: %w: drop --redis-tls and the --redis-tls-* files, or point --redis-addr at its TLS port", server, err)
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		// What a TLS port answers a plain client with.
		return fmt.Errorf("Redis %s closed the connection: %w (if it serves TLS only, set --redis-tls and --redis-tls-ca-file)", server, err)
	}
	return fmt.Errorf("Redis %s: %w", server, err)
}

// Misconfigured reports whether err says the pool's settings are wrong
// (login, ACL, TLS trust) or Redis's (an evicting maxmemory-policy:
// CheckEviction) rather than that Redis is down: waiting will not help,
// the operator must fix a setting.
func Misconfigured(err error) bool {
	if err == nil {
		return false
	}
	if evicting := (*EvictingError)(nil); errors.As(err, &evicting) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "x509:", "does not look like a TLS handshake"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
