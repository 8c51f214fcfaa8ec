package kafka

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// TestApacheKafkaSCRAMOverTLS runs sluice's Kafka client against a real
// Apache Kafka broker (bin/kafka, `make kafka`) whose client listener is
// configured as deploy/compose/compose.secure.yaml's: SASL_SSL with
// SCRAM-SHA-512 (the user added when the storage is formatted), a PEM
// keystore, no client certificates, replication over a separate plain
// loopback listener. The right settings produce at both acks levels and
// consume; each wrong one fails with the error that names its fix, as
// against kfake.
func TestApacheKafkaSCRAMOverTLS(t *testing.T) {
	start := time.Now()
	_, certs, good := securedKafka(t, SASLSCRAMSHA512, testenv.ApacheKafka())
	t.Logf("the secured broker started in %s", time.Since(start).Round(time.Millisecond))

	t.Run("right settings", func(t *testing.T) {
		if err := produceOne(t, &good, "job"); err != nil {
			t.Fatalf("produce with SCRAM-SHA-512 over TLS: %v", err)
		}
		if got := consumeAll(t, &good, "jobs"); len(got) != 2 {
			t.Fatalf("consumed %q, want the 2 records produced", got)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		bad := good
		bad.SASL.Password = cli.Secret{Value: "not-the-password"}
		err := produceOne(t, &bad, "lost")
		if !errors.Is(err, ErrSASLFailed) {
			t.Fatalf("a wrong password: %v, want ErrSASLFailed", err)
		}
		for _, want := range []string{`user "sluice"`, "SCRAM-SHA-512", "--kafka-sasl-password"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("a wrong password's error lacks %q: %v", want, err)
			}
		}
		if strings.Contains(err.Error(), "not-the-password") || strings.Contains(err.Error(), saslPass) {
			t.Errorf("the error shows a password: %v", err)
		}
	})
	t.Run("wrong mechanism", func(t *testing.T) {
		bad := good
		bad.SASL.Mechanism = SASLSCRAMSHA256
		if err := produceOne(t, &bad, "lost"); !errors.Is(err, ErrSASLFailed) {
			t.Fatalf("SCRAM-SHA-256 against a SCRAM-SHA-512 listener: %v, want ErrSASLFailed", err)
		}
	})
	t.Run("untrusted CA", func(t *testing.T) {
		bad := good
		bad.TLS.CAFile = certs.OtherCAFile
		if err := produceOne(t, &bad, "lost"); !errors.Is(err, ErrTLSUntrusted) || !strings.Contains(err.Error(), "--kafka-tls-ca-file") {
			t.Fatalf("an untrusted CA: %v, want ErrTLSUntrusted naming --kafka-tls-ca-file", err)
		}
	})
	t.Run("no SASL", func(t *testing.T) {
		bad := good
		bad.SASL = SASL{}
		if err := produceOne(t, &bad, "lost"); !errors.Is(err, ErrSASLRequired) || !strings.Contains(err.Error(), "--kafka-sasl-mechanism") {
			t.Fatalf("no SASL against a SASL listener: %v", err)
		}
	})
	t.Run("no TLS", func(t *testing.T) {
		bad := good
		bad.TLS = tlsfiles.Client{}
		if err := produceOne(t, &bad, "lost"); !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "--kafka-tls") {
			t.Fatalf("plain TCP against a TLS listener: %v", err)
		}
	})
	// Nothing the failed attempts sent was written.
	if got := consumeAll(t, &good, "jobs"); len(got) != 2 || !strings.HasPrefix(got[0], "job-") || !strings.HasPrefix(got[1], "job-") {
		t.Fatalf("consumed %q, want only the 2 records produced with the right settings", got)
	}
}
