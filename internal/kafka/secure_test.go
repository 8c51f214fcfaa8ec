package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

const (
	saslUser = "sluice"
	saslPass = "s3cret-pass-word"
)

// securedKafka is kfake with SASL mechanism and TLS, and the Config that
// reaches it.
func securedKafka(t *testing.T, mechanism string, opts ...testenv.KafkaOption) (*testenv.KafkaCluster, *testenv.Certs, Config) {
	t.Helper()
	certs := testenv.NewCerts(t)
	k := testenv.Kafka(t, append([]testenv.KafkaOption{testenv.Topic("jobs", 2),
		testenv.KafkaSASL(mechanism, saslUser, saslPass), testenv.KafkaTLS(certs)}, opts...)...)
	cfg := Config{Brokers: k.Brokers(), ClientID: "test", Version: "3.6.0", Compression: "none",
		TLS:  tlsfiles.Client{CAFile: certs.CAFile},
		SASL: SASL{Mechanism: mechanism, User: saslUser, Password: cli.Secret{Value: saslPass}}}
	return k, certs, cfg
}

// consumeAll reads every record of topic through a client of cfg, as the
// relay and the console do.
func consumeAll(t *testing.T, cfg *Config, topic string) []string {
	t.Helper()
	sc, err := cfg.Sarama()
	if err != nil {
		t.Fatal(err)
	}
	client, err := cfg.Connect(context.Background(), sc)
	if err != nil {
		t.Fatalf("connect the consumer: %v", err)
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range parts {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if end == 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		for last := int64(-1); last < end-1; {
			select {
			case m := <-pc.Messages():
				out, last = append(out, string(m.Value)), m.Offset
			case err := <-pc.Errors():
				t.Fatalf("consume %s/%d: %v", topic, p, err)
			case <-time.After(10 * time.Second):
				t.Fatalf("consume %s/%d: no record within 10s", topic, p)
			}
		}
		pc.Close()
	}
	return out
}

func produceOne(t *testing.T, cfg *Config, value string) error {
	t.Helper()
	p, err := NewProducer(cfg, ProducerOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer p.Close()
	for _, acks := range []Acks{AcksLeader, AcksAll} {
		res, err := p.Produce(context.Background(), acks, []Message{{Topic: "jobs", Value: []byte(fmt.Sprintf("%s-%s", value, acks)), Partition: -1}})
		if err != nil {
			return err
		}
		if res[0].Err != nil {
			return res[0].Err
		}
	}
	return nil
}

// Every mechanism sluice offers logs in to kfake over TLS, and a producer
// (both acks levels) and a consumer work through it.
func TestKafkaSASLMechanismsOverTLS(t *testing.T) {
	for _, mech := range []string{SASLPlain, SASLSCRAMSHA256, SASLSCRAMSHA512} {
		t.Run(mech, func(t *testing.T) {
			_, _, cfg := securedKafka(t, mech)
			if err := produceOne(t, &cfg, "job"); err != nil {
				t.Fatalf("produce with %s over TLS: %v", mech, err)
			}
			if got := consumeAll(t, &cfg, "jobs"); len(got) != 2 {
				t.Fatalf("consumed %q, want the 2 records produced", got)
			}
		})
	}
}

// A wrong password and an untrusted CA each fail at the first connect, in
// seconds, with an error that says what is wrong and which setting fixes
// it, and that does not show the password. Once fixed, a job produced is
// consumed, and the failed attempts wrote nothing.
func TestKafkaWrongPasswordAndUntrustedCAFailFastAndClearly(t *testing.T) {
	_, certs, good := securedKafka(t, SASLSCRAMSHA512)

	wrongPass := good
	wrongPass.SASL.Password = cli.Secret{Value: "not-the-password"}
	start := time.Now()
	err := produceOne(t, &wrongPass, "lost")
	if !errors.Is(err, ErrSASLFailed) {
		t.Fatalf("a wrong password: %v, want ErrSASLFailed", err)
	}
	for _, want := range []string{"SASL authentication failed", `user "sluice"`, "SCRAM-SHA-512", "--kafka-sasl-user", "--kafka-sasl-password", "Config.Kafka.SASL.Password"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("a wrong password's error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "not-the-password") || strings.Contains(err.Error(), saslPass) {
		t.Errorf("the error shows a password: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("a wrong password took %v to fail", d)
	}

	untrusted := good
	untrusted.TLS.CAFile = certs.OtherCAFile
	start = time.Now()
	err = produceOne(t, &untrusted, "lost")
	if !errors.Is(err, ErrTLSUntrusted) {
		t.Fatalf("an untrusted CA: %v, want ErrTLSUntrusted", err)
	}
	for _, want := range []string{"certificate is not trusted", "--kafka-tls-ca-file", "Config.Kafka.TLS.CAFile", certs.OtherCAFile} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("an untrusted CA's error lacks %q: %v", want, err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("an untrusted CA took %v to fail", d)
	}
	// The system's roots do not hold the test CA either.
	systemRoots := good
	systemRoots.TLS = tlsfiles.Client{Enable: true}
	if err := produceOne(t, &systemRoots, "lost"); !errors.Is(err, ErrTLSUntrusted) || !strings.Contains(err.Error(), "system's roots") {
		t.Errorf("TLS with the system's roots: %v, want ErrTLSUntrusted naming the system's roots", err)
	}

	if err := produceOne(t, &good, "kept"); err != nil {
		t.Fatalf("produce once fixed: %v", err)
	}
	got := consumeAll(t, &good, "jobs")
	if len(got) != 2 || !strings.HasPrefix(got[0], "kept-") || !strings.HasPrefix(got[1], "kept-") {
		t.Fatalf("consumed %q, want the 2 records produced once fixed and nothing else", got)
	}
}

// The other mismatches are explained as well: no SASL against a listener
// that wants it, and plain TCP against a TLS listener.
func TestKafkaSecurityMismatchesAreExplained(t *testing.T) {
	_, _, good := securedKafka(t, SASLSCRAMSHA256)
	noSASL := good
	noSASL.SASL = SASL{}
	if err := produceOne(t, &noSASL, "x"); !errors.Is(err, ErrSASLRequired) || !strings.Contains(err.Error(), "--kafka-sasl-mechanism") {
		t.Errorf("no SASL against a SASL listener: %v", err)
	}
	noTLS := good
	noTLS.TLS = tlsfiles.Client{}
	if err := produceOne(t, &noTLS, "x"); !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "--kafka-tls") {
		t.Errorf("plain TCP against a TLS listener: %v", err)
	}
	// A broker that is down is said as it is, not diagnosed.
	down := good
	down.Brokers = cli.ListFlag{closedAddr(t)}
	err := produceOne(t, &down, "x")
	var ce *ConnectError
	if err == nil || errors.As(err, &ce) {
		t.Errorf("a closed port: %v, want sarama's error unexplained", err)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	k := testenv.Kafka(t)
	addr := k.Brokers()[0]
	k.Close()
	return addr
}

// The password file is read each time a client is made: a rotated
// password needs no new Config, and a part that connects again uses it.
func TestKafkaSASLPasswordFileIsReadAtEachConnect(t *testing.T) {
	_, _, cfg := securedKafka(t, SASLSCRAMSHA512)
	file := filepath.Join(t.TempDir(), "kafka-password")
	if err := os.WriteFile(file, []byte("old-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.SASL.Password = cli.Secret{File: file}
	if err := produceOne(t, &cfg, "x"); !errors.Is(err, ErrSASLFailed) {
		t.Fatalf("the old password: %v", err)
	}
	if err := os.WriteFile(file, []byte(saslPass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := produceOne(t, &cfg, "x"); err != nil {
		t.Fatalf("the new password from the same file: %v", err)
	}
}

// Sarama's configuration from each setting, and the errors of the
// settings that cannot work, naming field and flag, never the password.
func TestKafkaSecuritySettings(t *testing.T) {
	base := Config{Brokers: cli.ListFlag{"127.0.0.1:9"}, ClientID: "t", Version: "3.6.0", Compression: "none"}
	sc, err := base.Sarama()
	if err != nil || sc.Net.TLS.Enable || sc.Net.SASL.Enable {
		t.Fatalf("the default: TLS %v, SASL %v, %v: want both off", sc.Net.TLS.Enable, sc.Net.SASL.Enable, err)
	}
	certs := testenv.NewCerts(t)
	for _, mech := range []string{"plain", SASLSCRAMSHA256, SASLSCRAMSHA512} {
		c := base
		c.TLS = tlsfiles.Client{CAFile: certs.CAFile}
		c.SASL = SASL{Mechanism: mech, User: "u", Password: cli.Secret{Value: "p"}}
		sc, err := c.Sarama()
		if err != nil {
			t.Fatalf("%s: %v", mech, err)
		}
		if !sc.Net.TLS.Enable || sc.Net.TLS.Config == nil || sc.Net.TLS.Config.RootCAs == nil {
			t.Errorf("%s: TLS not applied: %+v", mech, sc.Net.TLS)
		}
		s := sc.Net.SASL
		if !s.Enable || string(s.Mechanism) != strings.ToUpper(mech) || s.User != "u" || s.Password != "p" || s.Version != sarama.SASLHandshakeV1 {
			t.Errorf("%s: SASL %+v", mech, s)
		}
		if (s.SCRAMClientGeneratorFunc != nil) != strings.HasPrefix(mech, "SCRAM") {
			t.Errorf("%s: SCRAM client generator set: %v", mech, s.SCRAMClientGeneratorFunc != nil)
		}
		if err := sc.Validate(); err != nil {
			t.Errorf("%s: sarama refuses the config: %v", mech, err)
		}
	}
	missing := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		name string
		sasl SASL
		tls  tlsfiles.Client
		want []string
	}{
		{"unknown mechanism", SASL{Mechanism: "GSSAPI", User: "u", Password: cli.Secret{Value: "hunter2"}}, tlsfiles.Client{}, []string{"Config.Kafka.SASL.Mechanism", "--kafka-sasl-mechanism", "GSSAPI", "SCRAM-SHA-512"}},
		{"no user", SASL{Mechanism: SASLPlain, Password: cli.Secret{Value: "hunter2"}}, tlsfiles.Client{}, []string{"Config.Kafka.SASL.User", "--kafka-sasl-user"}},
		{"no password", SASL{Mechanism: SASLPlain, User: "u"}, tlsfiles.Client{}, []string{"Config.Kafka.SASL.Password", "--kafka-sasl-password-file"}},
		{"no mechanism", SASL{User: "u", Password: cli.Secret{Value: "hunter2"}}, tlsfiles.Client{}, []string{"Config.Kafka.SASL.Mechanism", "--kafka-sasl-mechanism"}},
		{"missing password file", SASL{Mechanism: SASLPlain, User: "u", Password: cli.Secret{File: missing}}, tlsfiles.Client{}, []string{"Config.Kafka.SASL.Password", "--kafka-sasl-password-file", missing}},
		{"missing CA file", SASL{}, tlsfiles.Client{CAFile: missing}, []string{"Config.Kafka.TLS", "--kafka-tls", missing}},
	} {
		c := base
		c.SASL, c.TLS = tc.sasl, tc.tls
		_, err := c.Sarama()
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the error lacks %q: %v", tc.name, w, err)
			}
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the password: %v", tc.name, err)
		}
	}
}

// Printing a Config, as %v, %+v or a text log line does, never shows the
// password.
func TestKafkaConfigPrintsNoPassword(t *testing.T) {
	c := Config{Brokers: cli.ListFlag{"b:9092"}, SASL: SASL{Mechanism: SASLPlain, User: "u", Password: cli.Secret{Value: "hunter2"}}}
	var log strings.Builder
	slog.New(slog.NewTextHandler(&log, nil)).Info("config", "kafka", c, "sasl", c.SASL, "password", c.SASL.Password)
	for _, s := range []string{fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprint(c.SASL), log.String()} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("a printed Config shows the password: %s", s)
		}
	}
}

// A listener that asks for a client certificate: without one the error
// says to set --kafka-tls-cert-file; with certs.Client() it works.
func TestKafkaMutualTLS(t *testing.T) {
	certs := testenv.NewCerts(t)
	k := testenv.Kafka(t, testenv.Topic("jobs", 1), testenv.KafkaMutualTLS(certs))
	cfg := Config{Brokers: k.Brokers(), ClientID: "test", Version: "3.6.0", Compression: "none", TLS: tlsfiles.Client{CAFile: certs.CAFile}}
	err := produceOne(t, &cfg, "x")
	if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "--kafka-tls-cert-file") {
		t.Errorf("no client certificate for a mutual TLS listener: %v", err)
	}
	cfg.TLS = certs.Client()
	if err := produceOne(t, &cfg, "x"); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
}
