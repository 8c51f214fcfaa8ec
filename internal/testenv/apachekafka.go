package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicehq/sluice/internal/stack"
)

// SkipWithoutApacheKafka skips tb when the real broker (bin/kafka, `make
// kafka`) is missing, saying how to get it, unless CI=true: there it fails
// tb, since `make test` fetches the broker before running any test.
func SkipWithoutApacheKafka(tb testing.TB) {
	tb.Helper()
	if _, err := stack.FindApacheKafka(); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("testenv: %v (CI=true: the real-broker tests must run)", err)
		}
		tb.Skipf("testenv: skipping a real-broker test: %v", err)
	}
}

// apacheKafka is the backend of real brokers as child processes.
type apacheKafka struct {
	k      *stack.ApacheKafka
	tb     testing.TB // nil from StartKafka
	dir    string
	ownDir bool // made here, so removed at close unless the test failed
}

func startApacheKafka(ctx context.Context, tb testing.TB, o kafkaOpts) (*apacheKafka, error) {
	dir, own := o.dataDir, false
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "sluice-testenv-kafka-"); err != nil {
			return nil, err
		}
		own = true
	}
	cfg := stack.ApacheKafkaConfig{
		Dir:        dir,
		Brokers:    o.brokers,
		Topics:     o.topics,
		SASL:       o.sasl,
		Properties: o.props,

		DedicatedController: o.ctrl,
	}
	if c := o.certs; c != nil {
		cfg.TLS = &stack.ApacheKafkaTLS{CertFile: c.ServerCertFile, KeyFile: c.ServerKey}
		if o.mutual {
			cfg.TLS.ClientCAFile = c.CAFile
		}
	}
	k, err := stack.StartApacheKafka(ctx, cfg)
	if err != nil {
		if own {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	return &apacheKafka{k: k, tb: tb, dir: dir, ownDir: own}, nil
}

func (a *apacheKafka) brokers() []string       { return a.k.Brokers() }
func (a *apacheKafka) cluster() *kfake.Cluster { return nil }
func (a *apacheKafka) createTopic(ctx context.Context, name string, partitions int32) error {
	return a.k.CreateTopic(ctx, name, partitions)
}

// stop kills every broker: an outage of the whole cluster, as kfake's Stop.
func (a *apacheKafka) stop(context.Context) error {
	for _, n := range a.k.Nodes() {
		if err := a.k.Kill(n); err != nil {
			return err
		}
	}
	return nil
}

func (a *apacheKafka) start(ctx context.Context) error { return a.k.Start(ctx, a.k.Nodes()...) }

func (a *apacheKafka) restart(ctx context.Context) error {
	if err := a.stop(ctx); err != nil {
		return err
	}
	return a.start(ctx)
}

// logNodes is the brokers' node ids, then the dedicated controller's.
func (a *apacheKafka) logNodes() []int32 {
	if c := a.k.Controller(); c != 0 {
		return append(a.k.Nodes(), c)
	}
	return a.k.Nodes()
}

// nodeName is how a log names node.
func (a *apacheKafka) nodeName(node int32) string {
	if node == a.k.Controller() {
		return fmt.Sprintf("kafka controller %d", node)
	}
	return fmt.Sprintf("kafka broker %d", node)
}

// close kills the brokers (and the dedicated controller). After a failed
// test it logs the tail of each one's log and keeps them all, naming the
// directory.
func (a *apacheKafka) close() error {
	a.k.Close()
	if a.tb != nil && a.tb.Failed() {
		for _, n := range a.logNodes() {
			a.tb.Logf("testenv: %s, the end of %s:\n%s", a.nodeName(n), a.k.LogFile(n), logTail(a.k.LogFile(n), 60))
		}
		a.tb.Logf("testenv: the brokers' logs and data are kept in %s", a.dir)
		return nil
	}
	if a.ownDir {
		return os.RemoveAll(a.dir)
	}
	return nil
}

// logTail is the last n lines of file, or why there are none.
func logTail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// apache returns the real brokers, failing if this cluster is kfake or a
// container.
func (k *KafkaCluster) apache(what string) *stack.ApacheKafka {
	a, ok := k.be.(*apacheKafka)
	if !ok {
		k.f.fatalf("testenv: KafkaCluster.%s needs real brokers as child processes: start the cluster with testenv.ApacheKafka() (or %s=%s)", what, EnvKafka, kafkaApache)
		return nil
	}
	return a.k
}

// IsApache reports whether the cluster is real Apache Kafka brokers run by
// the test bed (ApacheKafka, or SLUICE_TEST_KAFKA=apache).
func (k *KafkaCluster) IsApache() bool {
	_, ok := k.be.(*apacheKafka)
	return ok
}

// Real returns the real brokers' own handle, whose controls return errors
// instead of failing the test: for a test that breaks brokers from
// goroutines of its own (the chaos suite), where t.Fatal may not be
// called. nil for kfake and docker mode.
func (k *KafkaCluster) Real() *stack.ApacheKafka {
	if a, ok := k.be.(*apacheKafka); ok {
		return a.k
	}
	return nil
}

// Nodes returns the brokers' node ids, 1 to N. Real brokers only.
func (k *KafkaCluster) Nodes() []int32 { return k.apache("Nodes").Nodes() }

// KillBroker kills broker node with SIGKILL, as a crash would. Real brokers
// only, like every broker control below.
func (k *KafkaCluster) KillBroker(node int32) {
	if err := k.apache("KillBroker").Kill(node); err != nil {
		k.f.fatalf("testenv: %v", err)
	}
}

// StopBroker shuts broker node down gracefully (SIGTERM: its leaderships
// move first).
func (k *KafkaCluster) StopBroker(node int32) {
	a := k.apache("StopBroker")
	k.f.do(startTimeout, fmt.Sprintf("stopping kafka broker %d", node), func(ctx context.Context) error { return a.Stop(ctx, node) })
}

// StartBroker starts a stopped or killed broker node again from its data,
// on the same ports, and waits until it is registered.
func (k *KafkaCluster) StartBroker(node int32) {
	a := k.apache("StartBroker")
	k.f.do(startTimeout, fmt.Sprintf("starting kafka broker %d", node), func(ctx context.Context) error { return a.Start(ctx, node) })
}

// RestartBroker is StopBroker and StartBroker.
func (k *KafkaCluster) RestartBroker(node int32) {
	a := k.apache("RestartBroker")
	k.f.do(startTimeout, fmt.Sprintf("restarting kafka broker %d", node), func(ctx context.Context) error { return a.Restart(ctx, node) })
}

// PauseBroker freezes broker node (SIGSTOP): connections stay open and
// nothing answers, as in a long GC pause. ResumeBroker ends it.
func (k *KafkaCluster) PauseBroker(node int32) {
	if err := k.apache("PauseBroker").Pause(node); err != nil {
		k.f.fatalf("testenv: %v", err)
	}
}

// ResumeBroker continues a paused broker node (SIGCONT).
func (k *KafkaCluster) ResumeBroker(node int32) {
	if err := k.apache("ResumeBroker").Resume(node); err != nil {
		k.f.fatalf("testenv: %v", err)
	}
}

// CreateTopicWith creates a topic with topic configs over the brokers'
// defaults (min.insync.replicas, say). Real brokers only.
func (k *KafkaCluster) CreateTopicWith(name string, partitions int32, configs map[string]string) {
	a := k.apache("CreateTopicWith")
	k.f.do(startTimeout, "creating topic "+name, func(ctx context.Context) error {
		return a.CreateTopicWith(ctx, name, partitions, configs)
	})
}

// DeleteTopic deletes a topic and waits until no running broker lists it.
// Real brokers only.
func (k *KafkaCluster) DeleteTopic(name string) {
	a := k.apache("DeleteTopic")
	k.f.do(startTimeout, "deleting topic "+name, func(ctx context.Context) error { return a.DeleteTopic(ctx, name) })
}

// Partition returns a partition's leader (-1: none) and in-sync replicas as
// a running broker sees them. Real brokers only.
func (k *KafkaCluster) Partition(topic string, partition int32) stack.PartitionState {
	a := k.apache("Partition")
	var st stack.PartitionState
	k.f.do(stopTimeout, fmt.Sprintf("reading %s/%d's leader", topic, partition), func(ctx context.Context) error {
		var err error
		st, err = a.Partition(ctx, topic, partition)
		return err
	})
	return st
}

// BrokerLogs is the last lines of every real broker's log (and the
// dedicated controller's), for a test's
// own failure message; "" for kfake.
func (k *KafkaCluster) BrokerLogs(lines int) string {
	a, ok := k.be.(*apacheKafka)
	if !ok {
		return ""
	}
	var sb strings.Builder
	for _, n := range a.logNodes() {
		fmt.Fprintf(&sb, "--- %s (%s) ---\n%s\n", a.nodeName(n), a.k.LogFile(n), logTail(a.k.LogFile(n), lines))
	}
	return sb.String()
}
