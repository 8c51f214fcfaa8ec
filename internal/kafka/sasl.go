package kafka

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"github.com/sluicehq/sluice/internal/cli"
)

// SASL mechanisms sluice speaks to Kafka.
const (
	SASLPlain       = "PLAIN"
	SASLSCRAMSHA256 = "SCRAM-SHA-256"
	SASLSCRAMSHA512 = "SCRAM-SHA-512"
)

// SASL is how a part authenticates to Kafka.
type SASL struct {
	// Mechanism is "" (no SASL), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	// (any case). Default "": no SASL. PLAIN sends the password as it is:
	// use it only with TLS.
	Mechanism string
	// User is the SASL user name. Default "": needed when Mechanism is set.
	User string
	// Password is the user's password, inline or in a file re-read each
	// time a client connects. Default: none; needed when Mechanism is set.
	// Never printed.
	Password cli.Secret
}

func (s *SASL) register(fs *flag.FlagSet) {
	fs.StringVar(&s.Mechanism, "kafka-sasl-mechanism", s.Mechanism, `SASL mechanism to authenticate to Kafka with: PLAIN (only with TLS), SCRAM-SHA-256 or SCRAM-SHA-512; "" for none`)
	fs.StringVar(&s.User, "kafka-sasl-user", s.User, "Kafka SASL user (with --kafka-sasl-mechanism)")
	cli.SecretVar(fs, &s.Password, "kafka-sasl-password", "the Kafka SASL user's password")
}

// Enabled reports whether s asks for SASL.
func (s SASL) Enabled() bool { return s.Mechanism != "" }

// mechanism is s.Mechanism in sarama's spelling, or an error naming the
// field and flag.
func (s SASL) mechanism() (sarama.SASLMechanism, error) {
	switch m := strings.ToUpper(strings.TrimSpace(s.Mechanism)); m {
	case SASLPlain, SASLSCRAMSHA256, SASLSCRAMSHA512:
		return sarama.SASLMechanism(m), nil
	}
	return "", fmt.Errorf("Config.Kafka.SASL.Mechanism (--kafka-sasl-mechanism) %q: want %s, %s or %s, or \"\" for no SASL",
		s.Mechanism, SASLPlain, SASLSCRAMSHA256, SASLSCRAMSHA512)
}

// apply sets sc's SASL from s. Its errors name the field and the flag, and
// never hold the password.
func (s SASL) apply(sc *sarama.Config) error {
	if !s.Enabled() {
		// Credentials without a mechanism would be dropped silently, and
		// the broker's refusal would not say why.
		if s.User != "" || s.Password.Set() {
			return errors.New("Config.Kafka.SASL.User or .Password is set but Config.Kafka.SASL.Mechanism (--kafka-sasl-mechanism) is empty: " +
				"set it to the broker's mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), or drop --kafka-sasl-user and --kafka-sasl-password")
		}
		return nil
	}
	mech, err := s.mechanism()
	if err != nil {
		return err
	}
	if s.User == "" {
		return fmt.Errorf("Config.Kafka.SASL.User (--kafka-sasl-user): empty, but Config.Kafka.SASL.Mechanism is %s: set the user", mech)
	}
	if !s.Password.Set() {
		return fmt.Errorf("Config.Kafka.SASL.Password (--kafka-sasl-password-file or --kafka-sasl-password): empty, but Config.Kafka.SASL.Mechanism is %s: set the password of %q", mech, s.User)
	}
	pass, err := s.Password.Read()
	if err != nil {
		return fmt.Errorf("Config.Kafka.SASL.Password (--kafka-sasl-password-file): %w", err)
	}
	sc.Net.SASL.Enable = true
	sc.Net.SASL.Mechanism = mech
	sc.Net.SASL.Handshake = true
	// v1 (Kafka 1.0+) carries the broker's refusal as an error code; v0
	// only closes the connection, which says nothing about why.
	sc.Net.SASL.Version = sarama.SASLHandshakeV1
	if !sc.Version.IsAtLeast(sarama.V1_0_0_0) {
		sc.Net.SASL.Version = sarama.SASLHandshakeV0
	}
	sc.Net.SASL.User = s.User
	sc.Net.SASL.Password = pass
	switch mech {
	case SASLSCRAMSHA256:
		sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA256} }
	case SASLSCRAMSHA512:
		sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA512} }
	}
	return nil
}

// scramClient is sarama's SCRAMClient over xdg-go/scram, as sarama's own
// SCRAM example does: sarama leaves the SCRAM arithmetic to the caller.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (c *scramClient) Begin(user, password, authzID string) error {
	cl, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		// The error names what stringprep refused, never the password.
		return fmt.Errorf("SCRAM: %w", err)
	}
	c.conv = cl.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) { return c.conv.Step(challenge) }

func (c *scramClient) Done() bool { return c.conv.Done() }
