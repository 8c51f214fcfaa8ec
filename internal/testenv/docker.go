package testenv

// The SLUICE_TESTENV=docker test bed: the same components as real images
// through testcontainers-go. Every published port is a fixed host port chosen
// free beforehand and mapped to the same port number, so addresses survive a
// container restart (Docker would otherwise map a new random port) and Kafka
// can advertise the address clients use. It assumes a local Docker engine.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicehq/sluice/internal/stack"
)

const (
	redisImage  = "redis:7.4"
	consulImage = "hashicorp/consul:1.15.4"
	kafkaImage  = "apache/kafka:3.9.0"
)

// dockerContainer is one container with a fixed host port.
type dockerContainer struct {
	c    *testcontainers.DockerContainer
	port int
}

// runFixedPort runs image with containerPort published on a free host port;
// portFn gets that host port so it can go into the command or environment.
// A port taken before Docker binds it is retried with another.
func runFixedPort(ctx context.Context, image, containerPort string, portFn func(hostPort int) []testcontainers.ContainerCustomizer) (*dockerContainer, error) {
	var dc *dockerContainer
	err := withFreePort(func(port int) error {
		cport := containerPort
		if cport == "" {
			cport = strconv.Itoa(port) // listen inside on the host's port number
		}
		cp, err := network.ParsePort(cport + "/tcp")
		if err != nil {
			return err
		}
		opts := append([]testcontainers.ContainerCustomizer{
			testcontainers.WithExposedPorts(cp.String()),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.PortBindings = network.PortMap{cp: {{
					HostIP:   netip.MustParseAddr("127.0.0.1"),
					HostPort: strconv.Itoa(port),
				}}}
			}),
		}, portFn(port)...)
		c, err := testcontainers.Run(ctx, image, opts...)
		if err != nil {
			terr := testcontainers.TerminateContainer(c)
			msg := err.Error()
			if strings.Contains(msg, "port is already allocated") || strings.Contains(msg, "address already in use") {
				return fmt.Errorf("running %s: %w (%w)", image, err, stack.ErrAddrInUse)
			}
			if strings.Contains(msg, "get provider") {
				return fmt.Errorf("running %s: %s=%s needs a running Docker engine: %w", image, EnvMode, modeDocker, err)
			}
			return errors.Join(fmt.Errorf("running %s: %w", image, err), terr)
		}
		dc = &dockerContainer{c: c, port: port}
		return nil
	})
	return dc, err
}

func (d *dockerContainer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(d.port)) }
func (d *dockerContainer) dir() string  { return "" }

func (d *dockerContainer) stop(ctx context.Context) error {
	timeout := 10 * time.Second
	return d.c.Stop(ctx, &timeout)
}

// kill stops with a zero timeout: Docker sends SIGKILL straight away.
func (d *dockerContainer) kill() error {
	ctx, cancel := stopCtx()
	defer cancel()
	var timeout time.Duration
	return d.c.Stop(ctx, &timeout)
}

// restart starts the stopped container again; Start reruns the wait strategy.
func (d *dockerContainer) restart(ctx context.Context) error {
	if err := d.stop(ctx); err != nil {
		return err
	}
	return d.c.Start(ctx)
}

func (d *dockerContainer) start(ctx context.Context) error { return d.c.Start(ctx) }

func (d *dockerContainer) close(context.Context) error {
	return testcontainers.TerminateContainer(d.c)
}

func (d *dockerContainer) exec(ctx context.Context, cmd ...string) (string, error) {
	code, r, err := d.c.Exec(ctx, cmd, tcexec.Multiplexed())
	if err != nil {
		return "", fmt.Errorf("exec %v: %w", cmd, err)
	}
	out, _ := io.ReadAll(r)
	if code != 0 {
		return string(out), fmt.Errorf("exec %v: exit %d: %s", cmd, code, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func startRedisDocker(ctx context.Context, o redisOpts) (backend, error) {
	return runFixedPort(ctx, redisImage, "6379", func(int) []testcontainers.ContainerCustomizer {
		cmd := []string{"redis-server", "--save", "", "--maxmemory-policy", "noeviction"}
		if o.aof {
			cmd = append(cmd, "--appendonly", "yes", "--appendfsync", "everysec")
		} else {
			cmd = append(cmd, "--appendonly", "no")
		}
		if o.maxMemory != "" {
			cmd = append(cmd, "--maxmemory", o.maxMemory)
		}
		return []testcontainers.ContainerCustomizer{
			testcontainers.WithCmd(cmd...),
			// PING also answers -LOADING while the AOF loads, so this
			// waits for the data too.
			testcontainers.WithWaitStrategy(wait.ForExec([]string{"redis-cli", "ping"}).
				WithResponseMatcher(func(r io.Reader) bool { b, _ := io.ReadAll(r); return strings.Contains(string(b), "PONG") })),
		}
	})
}

func startConsulDocker(ctx context.Context) (backend, error) {
	return runFixedPort(ctx, consulImage, "8500", func(int) []testcontainers.ContainerCustomizer {
		return []testcontainers.ContainerCustomizer{
			testcontainers.WithCmd("agent", "-dev", "-client", "0.0.0.0"),
			// A leader is known a moment before KV takes writes, so
			// wait for a write.
			testcontainers.WithWaitStrategy(wait.ForExec([]string{"sh", "-c",
				"consul kv put _sluice/testenv/ready 1 && consul kv delete _sluice/testenv/ready"})),
		}
	})
}

type kafkaDocker struct {
	*dockerContainer
}

func startKafkaDocker(ctx context.Context, o kafkaOpts) (kafkaBackend, error) {
	if o.brokers > 1 {
		return nil, fmt.Errorf("testenv: %s=%s runs a single Kafka broker, the test asks for %d", EnvMode, modeDocker, o.brokers)
	}
	dc, err := runFixedPort(ctx, kafkaImage, "", func(port int) []testcontainers.ContainerCustomizer {
		p := strconv.Itoa(port)
		return []testcontainers.ContainerCustomizer{
			testcontainers.WithEnv(map[string]string{
				"KAFKA_NODE_ID":                                  "1",
				"KAFKA_PROCESS_ROLES":                            "broker,controller",
				"KAFKA_LISTENERS":                                "PLAINTEXT://:" + p + ",CONTROLLER://:9093",
				"KAFKA_ADVERTISED_LISTENERS":                     "PLAINTEXT://127.0.0.1:" + p,
				"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
				"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":           "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
				"KAFKA_CONTROLLER_QUORUM_VOTERS":                 "1@localhost:9093",
				"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
				"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
				"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
				"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
				"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                "false",
				"KAFKA_NUM_PARTITIONS":                           "1",
			}),
			// The advertised address is the container's own loopback
			// inside it, so the tool reaches the broker from there.
			testcontainers.WithWaitStrategy(wait.ForExec([]string{"/opt/kafka/bin/kafka-topics.sh",
				"--bootstrap-server", "127.0.0.1:" + p, "--list"}).
				WithPollInterval(time.Second)),
		}
	})
	if err != nil {
		return nil, err
	}
	k := &kafkaDocker{dc}
	for _, name := range slices.Sorted(maps.Keys(o.topics)) {
		if err := k.createTopic(ctx, name, o.topics[name]); err != nil {
			return nil, errors.Join(err, dc.close(ctx))
		}
	}
	return k, nil
}

func (k *kafkaDocker) brokers() []string       { return []string{k.addr()} }
func (k *kafkaDocker) cluster() *kfake.Cluster { return nil }
func (k *kafkaDocker) close() error            { return k.dockerContainer.close(context.Background()) }

func (k *kafkaDocker) createTopic(ctx context.Context, name string, partitions int32) error {
	_, err := k.exec(ctx, "/opt/kafka/bin/kafka-topics.sh", "--bootstrap-server", k.addr(),
		"--create", "--topic", name, "--partitions", strconv.Itoa(int(partitions)), "--replication-factor", "1")
	if err != nil {
		return fmt.Errorf("creating topic %s: %w", name, err)
	}
	return nil
}
