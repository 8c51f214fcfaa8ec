package stack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
)

// KafkaConfig configures an in-process kfake cluster.
type KafkaConfig struct {
	// Brokers is the number of brokers, overriding the default of 1.
	// Ignored if Ports is set.
	Brokers int
	// Ports are fixed ports, one per broker, overriding free ports. A 0
	// entry is a free port. Free ports are chosen once and kept across
	// Restart, so clients' bootstrap addresses stay valid.
	Ports []int
	// Topics are created with their partition counts if they do not
	// exist yet. Topics that exist already, as after a restart from
	// DataDir, are left as they are.
	Topics map[string]int32
	// DataDir enables kfake's disk persistence; the cluster reloads its
	// state from it on start. Restart needs it.
	DataDir string
	// SASL, when its Mechanism is set, makes every broker require SASL
	// authentication, with User and Password as the one (super)user.
	// Default: none, any client is served.
	SASL KafkaSASL
	// TLS, when set, makes every broker listen with TLS only (its
	// certificate in TLS.Certificates or GetCertificate). Default nil:
	// plain TCP.
	TLS *tls.Config
}

// KafkaSASL is the user a SASL-enabled kfake cluster knows.
type KafkaSASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. Default "":
	// SASL off.
	Mechanism string
	// User and Password are the credentials the brokers accept.
	// Default "": none (kfake then knows no user).
	User, Password string
}

// Kafka is an in-process kfake cluster. Topics are never created on the fly
// by metadata requests: AllowAutoTopicCreation stays off, as in production.
type Kafka struct {
	cfg KafkaConfig

	mu     sync.Mutex
	c      *kfake.Cluster
	addrs  []string
	ports  []int
	closed bool
}

// StartKafka starts the cluster and creates cfg.Topics.
func StartKafka(ctx context.Context, cfg KafkaConfig) (*Kafka, error) {
	if cfg.Brokers <= 0 {
		cfg.Brokers = 1
	}
	ports := slices.Clone(cfg.Ports)
	if len(ports) == 0 {
		ports = make([]int, cfg.Brokers)
	}
	k := &Kafka{cfg: cfg}
	if err := k.start(ctx, ports); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *Kafka) start(ctx context.Context, ports []int) error {
	opts := []kfake.Opt{
		kfake.Ports(ports...),
		kfake.ClusterID("sluice"),
		// kfake's default of 10 would silently apply to topics a client
		// creates with -1 partitions; 1 is Kafka's own default.
		kfake.DefaultNumPartitions(1),
	}
	if k.cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(k.cfg.DataDir))
	}
	if m := k.cfg.SASL.Mechanism; m != "" {
		switch m {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return fmt.Errorf("stack: KafkaConfig.SASL.Mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", m)
		}
		if k.cfg.SASL.User == "" || k.cfg.SASL.Password == "" {
			return errors.New("stack: KafkaConfig.SASL needs a User and a Password")
		}
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(m, k.cfg.SASL.User, k.cfg.SASL.Password))
	}
	if k.cfg.TLS != nil {
		opts = append(opts, kfake.TLS(k.cfg.TLS))
	}
	// No kfake.SeedTopics: kfake applies it only when DataDir holds no
	// state yet, so a topic added to the config later would be missing
	// after a reload. Creating what is missing covers both cases.
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("starting kafka on ports %v: %w (%w)", ports, err, ErrAddrInUse)
		}
		return fmt.Errorf("starting kafka: %w", err)
	}
	// ListenAddrs goes through the cluster's loop, which is gone after
	// Close; remember the addresses while we can.
	addrs := c.ListenAddrs()
	bound := make([]int, len(addrs))
	for i, a := range addrs {
		_, p, _ := net.SplitHostPort(a)
		bound[i], _ = strconv.Atoi(p)
	}
	k.mu.Lock()
	k.c, k.addrs, k.ports, k.closed = c, addrs, bound, false
	k.mu.Unlock()

	for _, name := range slices.Sorted(maps.Keys(k.cfg.Topics)) {
		if err := k.CreateTopic(ctx, name, k.cfg.Topics[name]); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			k.Close()
			return err
		}
	}
	return nil
}

// Brokers returns the brokers' "127.0.0.1:port" addresses. They stay the
// same across Restart.
func (k *Kafka) Brokers() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.addrs)
}

// Cluster returns the kfake cluster for fault injection (MoveTopicPartition,
// RemoveNode, Control, ...). Restart replaces it: fetch it again afterwards.
// Most methods of a closed kfake cluster block forever, so do not keep one
// across Close.
func (k *Kafka) Cluster() *kfake.Cluster {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.c
}

// Close shuts the cluster down; with DataDir it writes its state first.
// Connected clients see their connections closed. Close is idempotent.
func (k *Kafka) Close() {
	k.mu.Lock()
	c, closed := k.c, k.closed
	k.closed = true
	k.mu.Unlock()
	if c != nil && !closed {
		c.Close()
	}
}

// Restart closes the cluster and starts it again on the same ports from
// DataDir, which must be set; topics from the config that do not exist are
// created.
func (k *Kafka) Restart(ctx context.Context) error {
	if k.cfg.DataDir == "" {
		return errors.New("stack: kafka Restart needs KafkaConfig.DataDir; without it the restarted cluster would be empty")
	}
	k.Close()
	return k.Start(ctx)
}

// Start starts a closed cluster again on the same ports from DataDir, which
// must be set. Together with Close it models an outage of a length the
// caller chooses.
func (k *Kafka) Start(ctx context.Context) error {
	if k.cfg.DataDir == "" {
		return errors.New("stack: kafka Start needs KafkaConfig.DataDir; without it the started cluster would be empty")
	}
	k.mu.Lock()
	ports, closed := slices.Clone(k.ports), k.closed
	k.mu.Unlock()
	if !closed {
		return errors.New("stack: kafka is running; Close it first")
	}
	return k.start(ctx, ports)
}

// CreateTopic creates a topic with the given number of partitions; if the
// topic exists, the error is kerr.TopicAlreadyExists.
func (k *Kafka) CreateTopic(ctx context.Context, name string, partitions int32) error {
	k.mu.Lock()
	c, closed := k.c, k.closed
	k.mu.Unlock()
	if closed {
		return errors.New("stack: kafka cluster is closed")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if partitions <= 0 {
		return fmt.Errorf("stack: topic %s: partitions must be positive, got %d", name, partitions)
	}
	if err := c.CreateTopic(name, partitions, nil); err != nil {
		return fmt.Errorf("creating topic %s: %w", name, err)
	}
	return nil
}
