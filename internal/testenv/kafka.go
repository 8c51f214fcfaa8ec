package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicehq/sluice/internal/stack"
)

// KafkaOption configures Kafka and StartKafka.
type KafkaOption func(*kafkaOpts)

type kafkaOpts struct {
	brokers int
	topics  map[string]int32
	dataDir string
	sasl    stack.KafkaSASL
	certs   *Certs
	mutual  bool
	apache  bool              // the test needs the real broker
	props   map[string]string // brokers' extra server properties (real broker only)
	ctrl    bool              // a dedicated KRaft controller (real broker only)
}

// secured reports whether the options ask for SASL or TLS.
func (o kafkaOpts) secured() bool { return o.sasl.Mechanism != "" || o.certs != nil }

// Brokers sets the number of brokers, overriding the default of 1. Docker
// mode runs a single broker and fails for more.
func Brokers(n int) KafkaOption { return func(o *kafkaOpts) { o.brokers = n } }

// Topic creates a topic with the given partition count at start, and again
// after a Restart if it is missing.
func Topic(name string, partitions int32) KafkaOption {
	return func(o *kafkaOpts) {
		if o.topics == nil {
			o.topics = make(map[string]int32)
		}
		o.topics[name] = partitions
	}
}

// DataDir persists the cluster's state in dir (usually t.TempDir()), which
// Restart needs. The caller owns dir. Docker mode ignores it: the container
// keeps its own data across Restart.
func DataDir(dir string) KafkaOption { return func(o *kafkaOpts) { o.dataDir = dir } }

// KafkaSASL makes every broker require SASL authentication with mechanism
// (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) as user with password, the
// cluster's one user. Default: no SASL. Process mode only.
func KafkaSASL(mechanism, user, password string) KafkaOption {
	return func(o *kafkaOpts) { o.sasl = stack.KafkaSASL{Mechanism: mechanism, User: user, Password: password} }
}

// KafkaTLS makes every broker listen with TLS only, with certs' server
// certificate (for 127.0.0.1 and localhost): a client trusts certs.CAFile.
// Default: plain TCP. Process mode only.
func KafkaTLS(certs *Certs) KafkaOption { return func(o *kafkaOpts) { o.certs = certs } }

// KafkaMutualTLS is KafkaTLS whose brokers also ask every client for a
// certificate certs' CA signed (certs.Client() holds one). Process mode
// only.
func KafkaMutualTLS(certs *Certs) KafkaOption {
	return func(o *kafkaOpts) { o.certs, o.mutual = certs, true }
}

// ApacheKafka makes this cluster real Apache Kafka brokers whatever
// SLUICE_TEST_KAFKA says: for a test that depends on how the broker behaves
// (in-sync replicas, the group coordinator, topic deletion). The brokers run
// as child processes from bin/kafka in both test bed modes; see EnvKafka for
// what happens when it is missing.
func ApacheKafka() KafkaOption { return func(o *kafkaOpts) { o.apache = true } }

// KafkaProperty sets a server property on every real broker
// (unclean.leader.election.enable=true, say), over the test bed's own. kfake
// has no such settings, so it needs ApacheKafka or SLUICE_TEST_KAFKA=apache.
func KafkaProperty(key, value string) KafkaOption {
	return func(o *kafkaOpts) {
		if o.props == nil {
			o.props = make(map[string]string)
		}
		o.props[key] = value
	}
}

// KafkaDedicatedController runs the real brokers as brokers only, with one
// more process as the whole KRaft controller quorum (node id brokers+1,
// started first, stopped last; the broker controls still act on brokers 1
// to N). Without it every broker is also a controller, and two of three
// brokers down is the quorum lost: no election happens at all, so an
// unclean one needs this. kfake has no controllers, so it needs ApacheKafka
// or SLUICE_TEST_KAFKA=apache.
func KafkaDedicatedController() KafkaOption { return func(o *kafkaOpts) { o.ctrl = true } }

// EnvKafka chooses the Kafka of every test bed cluster: "kfake" (the
// default: kfake in process, fast, with fault injection) or "apache" (real
// Apache Kafka brokers from bin/kafka, `make kafka`, for every test). A test
// that needs the real broker asks for it with ApacheKafka. Where the real
// broker is wanted but bin/kafka is missing, the test is skipped, saying how
// to fetch it, unless CI=true: there it fails, since `make test` fetches
// the broker first.
const EnvKafka = "SLUICE_TEST_KAFKA"

const (
	kafkaKfake  = "kfake"
	kafkaApache = "apache"
)

// wantApache reports whether the options and EnvKafka ask for the real
// broker.
func (o kafkaOpts) wantApache() (bool, error) {
	switch v := os.Getenv(EnvKafka); v {
	case "", kafkaKfake:
		return o.apache, nil
	case kafkaApache:
		return true, nil
	default:
		return false, fmt.Errorf("testenv: unknown %s=%q: use %q (the default) or %q", EnvKafka, v, kafkaKfake, kafkaApache)
	}
}

// kafkaBackend is what runs the cluster: kfake in process, real brokers as
// child processes, or a container.
type kafkaBackend interface {
	brokers() []string
	cluster() *kfake.Cluster // nil in docker mode
	createTopic(ctx context.Context, name string, partitions int32) error
	restart(context.Context) error
	stop(context.Context) error
	start(context.Context) error
	close() error
}

// KafkaCluster is a Kafka cluster for tests: in process mode a kfake cluster,
// which also offers fault injection through Cluster, or with ApacheKafka real
// brokers, which offer the broker controls (KillBroker, PauseBroker, ...).
type KafkaCluster struct {
	f  failer
	be kafkaBackend

	closeOnce sync.Once
	closeErr  error
}

// Kafka starts a Kafka cluster for the test; t.Cleanup closes it. Topics are
// never created on the fly: create them with Topic or CreateTopic.
func Kafka(t testing.TB, opts ...KafkaOption) *KafkaCluster {
	t.Helper()
	k, err := startKafka(t, opts)
	return forTest(t, "kafka", k, err)
}

// StartKafka is Kafka for TestMain: the caller must call Close.
func StartKafka(opts ...KafkaOption) (*KafkaCluster, error) {
	return startKafka(nil, opts)
}

func startKafka(tb testing.TB, opts []KafkaOption) (*KafkaCluster, error) {
	o := kafkaOpts{brokers: 1}
	for _, opt := range opts {
		opt(&o)
	}
	apache, err := o.wantApache()
	if err != nil {
		return nil, err
	}
	if apache {
		if tb != nil {
			SkipWithoutApacheKafka(tb)
		}
		ctx, cancel := startCtx()
		defer cancel()
		be, err := startApacheKafka(ctx, tb, o)
		if err != nil {
			return nil, err
		}
		return &KafkaCluster{f: failer{tb}, be: be}, nil
	}
	if len(o.props) > 0 {
		return nil, fmt.Errorf("testenv: KafkaProperty needs the real broker (ApacheKafka or %s=%s); kfake has no server properties", EnvKafka, kafkaApache)
	}
	if o.ctrl {
		return nil, fmt.Errorf("testenv: KafkaDedicatedController needs the real broker (ApacheKafka or %s=%s); kfake has no controllers", EnvKafka, kafkaApache)
	}
	be, err := startBackend(
		func(ctx context.Context) (kafkaBackend, error) { return startKafkaProcess(ctx, o) },
		func(ctx context.Context) (kafkaBackend, error) {
			if o.secured() {
				return nil, fmt.Errorf("testenv: KafkaSASL and KafkaTLS need the in-process kfake cluster, but %s=%s runs a plaintext Kafka container; run this test with the process test bed", EnvMode, modeDocker)
			}
			return startKafkaDocker(ctx, o)
		},
	)
	if err != nil {
		return nil, err
	}
	return &KafkaCluster{f: failer{tb}, be: be}, nil
}

type kafkaProcess struct {
	k       *stack.Kafka
	dataDir string
}

func startKafkaProcess(ctx context.Context, o kafkaOpts) (kafkaBackend, error) {
	var tc *tls.Config
	if o.certs != nil {
		var err error
		if tc, err = o.certs.Server(o.mutual).Config(nil); err != nil {
			return nil, fmt.Errorf("testenv: kafka TLS: %w", err)
		}
	}
	// kfake binds port 0 itself, so there is no free port race here.
	k, err := stack.StartKafka(ctx, stack.KafkaConfig{
		Brokers: o.brokers,
		Topics:  o.topics,
		DataDir: o.dataDir,
		SASL:    o.sasl,
		TLS:     tc,
	})
	if err != nil {
		return nil, err
	}
	return &kafkaProcess{k: k, dataDir: o.dataDir}, nil
}

func (p *kafkaProcess) brokers() []string       { return p.k.Brokers() }
func (p *kafkaProcess) cluster() *kfake.Cluster { return p.k.Cluster() }
func (p *kafkaProcess) close() error            { p.k.Close(); return nil }
func (p *kafkaProcess) restart(ctx context.Context) error {
	if p.dataDir == "" {
		return errors.New("kafka Restart needs the cluster's state on disk: start it with testenv.DataDir(t.TempDir())")
	}
	return p.k.Restart(ctx)
}
func (p *kafkaProcess) stop(context.Context) error { p.k.Close(); return nil }
func (p *kafkaProcess) start(ctx context.Context) error {
	if p.dataDir == "" {
		return errors.New("kafka Start needs the cluster's state on disk: start it with testenv.DataDir(t.TempDir())")
	}
	return p.k.Start(ctx)
}
func (p *kafkaProcess) createTopic(ctx context.Context, name string, partitions int32) error {
	return p.k.CreateTopic(ctx, name, partitions)
}

// Brokers returns the seed brokers' "host:port" addresses; they stay the same
// across Restart.
func (k *KafkaCluster) Brokers() []string { return k.be.brokers() }

// Cluster returns the kfake cluster for fault injection (MoveTopicPartition,
// RemoveNode, Control, ...), or nil for real Kafka (ApacheKafka, docker
// mode), which has no such hooks: use the broker controls (KillBroker,
// PauseBroker, ...) there. Restart replaces the cluster: call Cluster again afterwards.
func (k *KafkaCluster) Cluster() *kfake.Cluster { return k.be.cluster() }

// kfake returns the kfake cluster, failing if there is none.
func (k *KafkaCluster) kfake(what string) *kfake.Cluster {
	c := k.be.cluster()
	if c == nil {
		k.f.fatalf("testenv: KafkaCluster.%s needs the in-process kfake cluster, but this cluster is real Kafka (ApacheKafka, %s=%s or %s=%s), which has no fault injection; use the broker controls (KillBroker, PauseBroker, ...) or run this test on kfake", what, EnvKafka, kafkaApache, EnvMode, modeDocker)
	}
	return c
}

// MoveTopicPartition makes node the leader of the partition, as a partition
// reassignment would. Process mode only.
func (k *KafkaCluster) MoveTopicPartition(topic string, partition, node int32) {
	if err := k.kfake("MoveTopicPartition").MoveTopicPartition(topic, partition, node); err != nil {
		k.f.fatalf("testenv: moving %s/%d to node %d: %v", topic, partition, node, err)
	}
}

// RemoveNode takes a broker out of the cluster: it stops accepting
// connections and its partitions get new leaders. Process mode only.
func (k *KafkaCluster) RemoveNode(node int32) {
	if err := k.kfake("RemoveNode").RemoveNode(node); err != nil {
		k.f.fatalf("testenv: removing node %d: %v", node, err)
	}
}

// CreateTopic creates a topic with the given number of partitions.
func (k *KafkaCluster) CreateTopic(name string, partitions int32) {
	ctx, cancel := startCtx()
	defer cancel()
	if err := k.be.createTopic(ctx, name, partitions); err != nil {
		k.f.fatalf("testenv: %v", err)
	}
}

// Restart stops the cluster and starts it again on the same ports. In process
// mode it needs DataDir, and reloads the topics, records and committed
// offsets from there.
func (k *KafkaCluster) Restart() { k.f.do(startTimeout, "restarting kafka", k.be.restart) }

// Stop takes the cluster down until Start: clients see connections refused,
// as in a Kafka outage. In process mode Start needs DataDir.
func (k *KafkaCluster) Stop() { k.f.do(startTimeout, "stopping kafka", k.be.stop) }

// Start starts a stopped cluster again on the same ports.
func (k *KafkaCluster) Start() { k.f.do(startTimeout, "starting kafka", k.be.start) }

// Close shuts the cluster down. Kafka calls it in t.Cleanup; it is safe to
// call more than once.
func (k *KafkaCluster) Close() error {
	k.closeOnce.Do(func() {
		if err := k.be.close(); err != nil {
			k.closeErr = fmt.Errorf("kafka: %w", err)
		}
	})
	return k.closeErr
}
