// Package kafka holds sluice's Kafka conventions on top of sarama: client
// configuration (no topic auto-creation, Java-compatible murmur2 keys), a
// producer pair for the two acks levels, and a cached catalogue of topics.
package kafka

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// Config is what every part needs to reach Kafka.
type Config struct {
	// Brokers are the bootstrap brokers, host:port. Default (Register)
	// 127.0.0.1:9092.
	Brokers cli.ListFlag
	// ClientID shows in broker logs and quotas. Default (Register) the
	// part's, as "sluice-gate".
	ClientID string
	// Version is the Kafka protocol version to speak, the oldest broker's.
	// Default (Register) "3.6.0".
	Version string
	// Compression of produced records: none, gzip, snappy, lz4, zstd.
	// Default (Register) "none".
	Compression string
	// TLS dials the brokers over TLS (--kafka-tls, --kafka-tls-ca-file,
	// ...). Default: off, plain TCP.
	TLS tlsfiles.Client
	// SASL authenticates to the brokers. Default: off.
	SASL SASL
}

// Register adds the Kafka flags to fs.
func (c *Config) Register(fs *flag.FlagSet, clientID string) {
	c.Brokers = cli.ListFlag{"127.0.0.1:9092"}
	fs.Var(&c.Brokers, "kafka-brokers", "Kafka bootstrap brokers, comma-separated host:port")
	fs.StringVar(&c.ClientID, "kafka-client-id", clientID, "Kafka client id (shows in broker logs and quotas)")
	fs.StringVar(&c.Version, "kafka-version", "3.6.0", "Kafka protocol version to speak (the oldest broker's version)")
	fs.StringVar(&c.Compression, "kafka-compression", "none", "produce compression: none, gzip, snappy, lz4, zstd")
	c.TLS = tlsfiles.Client{}
	c.TLS.Register(fs, "kafka", "Kafka")
	c.SASL = SASL{}
	c.SASL.register(fs)
}

// Sarama returns the base sarama configuration every sluice client uses,
// with TLS and SASL as c asks (the password file is read here, so a
// client made later reads a rotated password).
// Its errors name the field as a part's Config holds it (Config.Kafka.*):
// a library error names a field, and sluice adds the flag.
// Topics are never created as a side effect of a request: a typo in a URL
// must be a 404, not a new topic.
func (c *Config) Sarama() (*sarama.Config, error) {
	if len(c.Brokers) == 0 {
		return nil, errors.New("Config.Kafka.Brokers: no Kafka brokers given")
	}
	sc := sarama.NewConfig()
	sc.ClientID = c.ClientID
	v, err := sarama.ParseKafkaVersion(c.Version)
	if err != nil {
		return nil, fmt.Errorf("Config.Kafka.Version %q: %v", c.Version, err)
	}
	sc.Version = v
	sc.Metadata.AllowAutoTopicCreation = false
	if err := sc.Producer.Compression.UnmarshalText([]byte(c.Compression)); err != nil {
		return nil, fmt.Errorf("Config.Kafka.Compression %q: %v", c.Compression, err)
	}
	tc, err := c.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("Config.Kafka.TLS (--kafka-tls-*): %w", err)
	}
	if tc != nil {
		sc.Net.TLS.Enable, sc.Net.TLS.Config = true, tc
	}
	if err := c.SASL.apply(sc); err != nil {
		return nil, err
	}
	return sc, nil
}

// Acks is how many replicas must hold a message before a produce succeeds.
type Acks int

const (
	// AcksAll waits for every in-sync replica, through an idempotent
	// producer: the default (the zero value), as Kafka's own producer's
	// since 3.0. With min.insync.replicas >= 2 a 2xx survives the loss of
	// the leader.
	AcksAll Acks = iota
	// AcksLeader waits for the partition leader only: lower latency, the
	// opt-in (Slack's Kafkagate default); a leader lost before its
	// followers copied the record loses it.
	AcksLeader
)

func (a Acks) String() string {
	if a == AcksAll {
		return "all"
	}
	return "leader"
}

// ParseAcks reads "all" (also "-1" or "", the default) and "leader"
// (also "1").
func ParseAcks(s string) (Acks, error) {
	switch strings.ToLower(s) {
	case "leader", "1":
		return AcksLeader, nil
	case "", "all", "-1":
		return AcksAll, nil
	}
	return 0, fmt.Errorf("acks %q: want leader or all", s)
}

// Unavailable reports whether err means Kafka could not be reached or could
// not take the write now: the client should retry later (HTTP 503).
func Unavailable(err error) bool {
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrLeaderNotAvailable, sarama.ErrNotLeaderForPartition, sarama.ErrBrokerNotAvailable,
			sarama.ErrRequestTimedOut, sarama.ErrNotEnoughReplicas, sarama.ErrNotEnoughReplicasAfterAppend,
			sarama.ErrNetworkException, sarama.ErrKafkaStorageError, sarama.ErrNotController:
			return true
		}
		return false
	}
	// A broker that goes away mid-request shows as a bare EOF or reset.
	// sarama's circuit breaker opens after a partition's leader could not be
	// found a few times in a row (Kafka down), and fails messages at once
	// for a while: Kafka is as unavailable as when it refused them.
	var nerr net.Error
	return errors.Is(err, breaker.ErrBreakerOpen) || errors.Is(err, sarama.ErrOutOfBrokers) || errors.Is(err, sarama.ErrNotConnected) ||
		errors.Is(err, sarama.ErrClosedClient) || errors.Is(err, sarama.ErrShuttingDown) ||
		errors.Is(err, sarama.ErrControllerNotAvailable) || errors.As(err, &nerr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// BrokerAnswered reports whether err is an error code a broker answered
// with (NOT_ENOUGH_REPLICAS, LEADER_NOT_AVAILABLE, ...): Kafka was reached,
// and the refusal concerns the request's partition, not the cluster.
func BrokerAnswered(err error) bool {
	var kerr sarama.KError
	return errors.As(err, &kerr)
}

// TooLarge reports whether err means the message exceeds a size limit.
func TooLarge(err error) bool {
	var cerr sarama.ConfigurationError
	return errors.Is(err, sarama.ErrMessageSizeTooLarge) ||
		(errors.As(err, &cerr) && strings.Contains(string(cerr), "larger than configured"))
}

// UnknownTopic reports whether err means the topic or partition does not
// exist.
func UnknownTopic(err error) bool {
	return errors.Is(err, sarama.ErrUnknownTopicOrPartition) || errors.Is(err, sarama.ErrInvalidPartition)
}
