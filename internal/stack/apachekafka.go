package stack

// Real Apache Kafka brokers as child processes: the jars `make kafka` fetched
// into bin/kafka/libs (tools/kafka/pom.xml pins the version), run with the
// machine's Java. Each broker is also a KRaft controller (combined mode), so
// a cluster of N is N processes with a controller quorum of N; or, with
// DedicatedController, the N brokers are brokers only and one more process
// is the whole controller quorum.
//
// Every broker has three loopback listeners: CLIENT, the one clients are
// given (plain, or SASL and TLS as configured); INTERNAL, plain, for
// replication and for this package's own admin client (topics, readiness),
// which so never needs the clients' credentials; and CONTROLLER, the quorum.
// The secured compose overlay is laid out the same way.

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const apacheKafkaMissing = "Apache Kafka broker not found: run `make kafka` (fetches the version pinned in tools/kafka/pom.xml into bin/kafka/libs) or set SLUICE_KAFKA_HOME to a directory holding libs/"

// FindApacheKafka returns the directory holding the broker's libs/:
// $SLUICE_KAFKA_HOME if set, else bin/kafka under the module root, else
// kafka beside the running executable (bin/sluice next to bin/kafka).
func FindApacheKafka() (string, error) {
	ok := func(dir string) bool {
		m, _ := filepath.Glob(filepath.Join(dir, "libs", "kafka_2.13-*.jar"))
		return len(m) > 0
	}
	if home := os.Getenv("SLUICE_KAFKA_HOME"); home != "" {
		if !ok(home) {
			return "", fmt.Errorf("SLUICE_KAFKA_HOME=%s has no libs/kafka_2.13-*.jar; %s", home, apacheKafkaMissing)
		}
		return home, nil
	}
	if root, err := ModuleRoot(); err == nil {
		if dir := filepath.Join(root, "bin", "kafka"); ok(dir) {
			return dir, nil
		}
	}
	if exe, err := os.Executable(); err == nil {
		if dir := filepath.Join(filepath.Dir(exe), "kafka"); ok(dir) {
			return dir, nil
		}
	}
	return "", errors.New(apacheKafkaMissing)
}

// ApacheKafkaVersion is the broker version in home's libs, read from the
// kafka_2.13-<version>.jar file name, or "" if there is none.
func ApacheKafkaVersion(home string) string {
	m, _ := filepath.Glob(filepath.Join(home, "libs", "kafka_2.13-*.jar"))
	if len(m) == 0 {
		return ""
	}
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0]), "kafka_2.13-"), ".jar")
}

// ApacheKafkaConfig configures a cluster of Apache Kafka brokers.
type ApacheKafkaConfig struct {
	// Dir holds each broker's data and log (Dir/broker-<id>/). Required;
	// the caller owns it. Its brokers' logs are in server.log there.
	Dir string
	// Home is the directory holding libs/. Default: FindApacheKafka.
	Home string
	// Java is the java binary. Default: java from PATH.
	Java string
	// Brokers is the number of brokers, each also a controller. Default 1.
	// Internal topics and topics created here get a replication factor of
	// min(Brokers, 3) and min.insync.replicas of min(Brokers, 2).
	Brokers int
	// Topics are created with their partition counts at start.
	Topics map[string]int32
	// HeapMB is each broker's maximum heap. Default 256.
	HeapMB int
	// FullJIT runs the JVM with both JIT compilers. Default false: the
	// client compiler only, which starts a broker about a third faster and
	// is plenty for tests, but not for measuring throughput.
	FullJIT bool
	// SASL, when its Mechanism is set (PLAIN, SCRAM-SHA-256 or
	// SCRAM-SHA-512), makes the CLIENT listener require it, with User and
	// Password the one user (SCRAM users are added when the storage is
	// formatted, as KRaft needs). Default: no SASL.
	SASL KafkaSASL
	// TLS, when set, makes the CLIENT listener TLS only.
	TLS *ApacheKafkaTLS
	// Properties are extra server properties for every broker, applied
	// last (unclean.leader.election.enable=true, say).
	Properties map[string]string
	// ClientPorts are fixed CLIENT listener ports, one per broker; a 0
	// entry, or none given, is a free port.
	ClientPorts []int
	// DedicatedController runs one more process, node id Brokers+1, as
	// the only KRaft controller (process.roles=controller, its data and
	// server.log in Dir/controller-<id>/), and the brokers as brokers only.
	// Node ids 1 to Brokers stay the brokers', which every control below
	// acts on; the controller starts first and stops last. With it,
	// brokers can be stopped and killed while the quorum goes on electing
	// leaders, as with production's dedicated controllers: in combined
	// mode two of three brokers down is the quorum lost, so no election,
	// and no unclean one, can happen. Default false: combined mode.
	DedicatedController bool
	// Persist keeps a cluster's storage across runs, as `sluice dev`
	// does: a broker whose directory was formatted before starts from its
	// data (its other ports may change). Default false: every start
	// formats afresh.
	Persist bool
}

// ApacheKafkaTLS is the CLIENT listener's TLS, from PEM files.
type ApacheKafkaTLS struct {
	// CertFile and KeyFile are the brokers' certificate (chain) and key.
	// The key may be PKCS#8, PKCS#1 or SEC 1: it is written as the
	// unencrypted PKCS#8 Kafka's PEM keystore wants.
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the brokers require a client
	// certificate it signed (ssl.client.auth=required).
	ClientCAFile string
}

// ApacheKafka is a running cluster of Apache Kafka brokers.
type ApacheKafka struct {
	cfg       ApacheKafkaConfig
	java      string
	classpath string
	brokers   []*apacheBroker // by node id - 1
	ctrl      *apacheBroker   // the dedicated controller; nil in combined mode

	adminMu sync.Mutex
	admin   *kgo.Client // over the INTERNAL listeners
}

// apacheBroker is one broker process; its ports stay across restarts.
type apacheBroker struct {
	id                           int32
	dir                          string
	controllerOnly               bool // the dedicated controller: only ctrlPt is used
	clientPort, internal, ctrlPt int

	mu     sync.Mutex
	p      *proc
	paused bool
}

// StartApacheKafka formats each broker's storage, starts the brokers and
// waits until every one is registered and unfenced, then creates
// cfg.Topics. A port taken meanwhile is retried with fresh ports.
func StartApacheKafka(ctx context.Context, cfg ApacheKafkaConfig) (*ApacheKafka, error) {
	if cfg.Dir == "" {
		return nil, errors.New("stack: ApacheKafkaConfig.Dir is required")
	}
	if cfg.Brokers <= 0 {
		cfg.Brokers = 1
	}
	if cfg.HeapMB <= 0 {
		cfg.HeapMB = 256
	}
	switch cfg.SASL.Mechanism {
	case "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return nil, fmt.Errorf("stack: ApacheKafkaConfig.SASL.Mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", cfg.SASL.Mechanism)
	}
	if cfg.SASL.Mechanism != "" && (cfg.SASL.User == "" || cfg.SASL.Password == "") {
		return nil, errors.New("stack: ApacheKafkaConfig.SASL needs a User and a Password")
	}
	if cfg.Home == "" {
		home, err := FindApacheKafka()
		if err != nil {
			return nil, err
		}
		cfg.Home = home
	}
	java, err := lookBin(cfg.Java, "java", "java not found: the Kafka broker needs Java 17 or later (apt-get install openjdk-17-jre-headless, or `make kafka`)")
	if err != nil {
		return nil, err
	}
	k := &ApacheKafka{cfg: cfg, java: java, classpath: filepath.Join(cfg.Home, "libs", "*")}
	for range 3 {
		if err = k.startOnce(ctx); !errors.Is(err, ErrAddrInUse) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Topics)) {
		err := k.CreateTopic(ctx, name, cfg.Topics[name])
		if errors.Is(err, kerr.TopicAlreadyExists) {
			// Kept storage (sluice dev's restart): the broker reloads the
			// topic's logs before it leads its partitions, and a client that
			// comes first is told NOT_LEADER_OR_FOLLOWER.
			err = k.waitLeaders(ctx, name, cfg.Topics[name])
		}
		if err != nil {
			k.Close()
			return nil, err
		}
	}
	return k, nil
}

// startOnce picks ports, formats fresh storage and starts every broker.
func (k *ApacheKafka) startOnce(ctx context.Context) error {
	k.brokers = nil
	for i := range k.cfg.Brokers {
		b := &apacheBroker{id: int32(i + 1), dir: filepath.Join(k.cfg.Dir, fmt.Sprintf("broker-%d", i+1))}
		if i < len(k.cfg.ClientPorts) {
			b.clientPort = k.cfg.ClientPorts[i]
		}
		for _, p := range []*int{&b.clientPort, &b.internal, &b.ctrlPt} {
			if *p != 0 {
				continue
			}
			port, err := FreePort()
			if err != nil {
				return err
			}
			*p = port
		}
		if !k.cfg.Persist {
			// A retry starts from nothing too.
			if err := os.RemoveAll(b.dir); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(b.dir, 0o755); err != nil {
			return err
		}
		k.brokers = append(k.brokers, b)
	}
	k.ctrl = nil
	if k.cfg.DedicatedController {
		id := int32(len(k.brokers) + 1)
		c := &apacheBroker{id: id, dir: filepath.Join(k.cfg.Dir, fmt.Sprintf("controller-%d", id)), controllerOnly: true}
		port, err := FreePort()
		if err != nil {
			return err
		}
		c.ctrlPt = port
		if !k.cfg.Persist {
			if err := os.RemoveAll(c.dir); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return err
		}
		k.ctrl = c
	}
	if err := k.writeFiles(); err != nil {
		return err
	}
	if err := k.format(ctx); err != nil {
		return err
	}
	if k.ctrl != nil {
		if err := k.startController(ctx); err != nil {
			k.Close()
			return err
		}
	}
	// Every broker at once: none finishes starting before the quorum
	// has a majority.
	if err := k.Start(ctx, k.Nodes()...); err != nil {
		k.Close()
		return err
	}
	return nil
}

// replication is the replication factor of the cluster's topics, and
// minISR their min.insync.replicas.
func (k *ApacheKafka) replication() int { return min(len(k.brokers), 3) }
func (k *ApacheKafka) minISR() int      { return min(len(k.brokers), 2) }

// nodes is every process of the cluster: the brokers, then the dedicated
// controller if there is one.
func (k *ApacheKafka) nodes() []*apacheBroker {
	if k.ctrl == nil {
		return k.brokers
	}
	return append(slices.Clone(k.brokers), k.ctrl)
}

// writeFiles writes each node's server.properties and the shared log4j2
// configuration (and the TLS keystore).
func (k *ApacheKafka) writeFiles() error {
	var voters []string
	if k.ctrl != nil {
		voters = []string{fmt.Sprintf("%d@127.0.0.1:%d", k.ctrl.id, k.ctrl.ctrlPt)}
	} else {
		for _, b := range k.brokers {
			voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", b.id, b.ctrlPt))
		}
	}
	clientProto := "PLAINTEXT"
	switch {
	case k.cfg.SASL.Mechanism != "" && k.cfg.TLS != nil:
		clientProto = "SASL_SSL"
	case k.cfg.SASL.Mechanism != "":
		clientProto = "SASL_PLAINTEXT"
	case k.cfg.TLS != nil:
		clientProto = "SSL"
	}
	rf, isr := strconv.Itoa(k.replication()), strconv.Itoa(k.minISR())
	var keystore string
	if k.cfg.TLS != nil {
		keystore = filepath.Join(k.cfg.Dir, "keystore.pem")
		if err := writePEMKeystore(keystore, k.cfg.TLS.CertFile, k.cfg.TLS.KeyFile); err != nil {
			return fmt.Errorf("stack: kafka TLS keystore: %w", err)
		}
	}
	for _, b := range k.nodes() {
		props := map[string]string{
			"process.roles":                  "broker,controller",
			"node.id":                        strconv.Itoa(int(b.id)),
			"controller.quorum.voters":       strings.Join(voters, ","),
			"listeners":                      fmt.Sprintf("CLIENT://127.0.0.1:%d,INTERNAL://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", b.clientPort, b.internal, b.ctrlPt),
			"advertised.listeners":           fmt.Sprintf("CLIENT://127.0.0.1:%d,INTERNAL://127.0.0.1:%d", b.clientPort, b.internal),
			"listener.security.protocol.map": "CLIENT:" + clientProto + ",INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
			"inter.broker.listener.name":     "INTERNAL",
			"controller.listener.names":      "CONTROLLER",
			"log.dirs":                       filepath.Join(b.dir, "data"),

			"num.partitions":                                   "1",
			"default.replication.factor":                       rf,
			"min.insync.replicas":                              isr,
			"auto.create.topics.enable":                        "false",
			"offsets.topic.replication.factor":                 rf,
			"offsets.topic.num.partitions":                     "8",
			"transaction.state.log.replication.factor":         rf,
			"transaction.state.log.min.isr":                    isr,
			"transaction.state.log.num.partitions":             "4",
			"share.coordinator.state.topic.replication.factor": rf,
			"share.coordinator.state.topic.min.isr":            isr,
			"group.initial.rebalance.delay.ms":                 "0",

			// Small for a shared 2-core machine: the defaults size a
			// server (8 I/O threads, a 128 MiB cleaner buffer that would
			// fill the heap).
			"num.network.threads":               "2",
			"num.io.threads":                    "2",
			"background.threads":                "2",
			"num.recovery.threads.per.data.dir": "1",
			"log.cleaner.threads":               "1",
			"log.cleaner.dedupe.buffer.size":    strconv.Itoa(8 << 20),
			// A killed broker is fenced, and its partitions led
			// elsewhere, after 6 s instead of 9; a follower that stops
			// fetching leaves the in-sync set after 10 s instead of 30.
			"broker.heartbeat.interval.ms": "1000",
			"broker.session.timeout.ms":    "6000",
			"replica.lag.time.max.ms":      "10000",
		}
		if m := k.cfg.SASL.Mechanism; m != "" {
			props["sasl.enabled.mechanisms"] = m
			module := "org.apache.kafka.common.security.scram.ScramLoginModule required;"
			if m == "PLAIN" {
				module = fmt.Sprintf(`org.apache.kafka.common.security.plain.PlainLoginModule required user_%s="%s";`, k.cfg.SASL.User, k.cfg.SASL.Password)
			}
			props["listener.name.client."+strings.ToLower(m)+".sasl.jaas.config"] = module
		}
		if t := k.cfg.TLS; t != nil {
			props["ssl.keystore.type"] = "PEM"
			props["ssl.keystore.location"] = keystore
			props["ssl.client.auth"] = "none"
			if t.ClientCAFile != "" {
				props["ssl.client.auth"] = "required"
				props["ssl.truststore.type"] = "PEM"
				props["ssl.truststore.location"] = t.ClientCAFile
			}
		}
		switch {
		case b.controllerOnly:
			// The topic defaults above stay: the controller applies
			// them (min.insync.replicas, unclean.leader.election.enable
			// from Properties) when it elects leaders.
			props["process.roles"] = "controller"
			props["listeners"] = fmt.Sprintf("CONTROLLER://127.0.0.1:%d", b.ctrlPt)
			delete(props, "advertised.listeners")
			delete(props, "inter.broker.listener.name")
		case k.ctrl != nil:
			props["process.roles"] = "broker"
			props["listeners"] = fmt.Sprintf("CLIENT://127.0.0.1:%d,INTERNAL://127.0.0.1:%d", b.clientPort, b.internal)
		}
		maps.Copy(props, k.cfg.Properties)
		var sb strings.Builder
		for _, key := range slices.Sorted(maps.Keys(props)) {
			fmt.Fprintf(&sb, "%s=%s\n", key, props[key])
		}
		if err := os.WriteFile(filepath.Join(b.dir, "server.properties"), []byte(sb.String()), 0o600); err != nil {
			return err
		}
	}
	// INFO, without the configuration dumps of every client and server
	// (hundreds of lines per start).
	const log4j2 = `rootLogger.level=INFO
rootLogger.appenderRef.out.ref=out
appender.out.type=Console
appender.out.name=out
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.config.name=org.apache.kafka.common.config.AbstractConfig
logger.config.level=WARN
logger.appinfo.name=org.apache.kafka.common.utils.AppInfoParser
logger.appinfo.level=WARN
`
	return os.WriteFile(filepath.Join(k.cfg.Dir, "log4j2.properties"), []byte(log4j2), 0o644)
}

// writePEMKeystore writes the key (as unencrypted PKCS#8) followed by the
// certificate chain: Kafka's PEM keystore.
func writePEMKeystore(path, certFile, keyFile string) error {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(pair.PrivateKey)
	if err != nil {
		return err
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	for _, c := range pair.Certificate {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c})...)
	}
	return os.WriteFile(path, out, 0o600)
}

// jvmArgs are the JVM's options: a small heap and the serial collector,
// which suits a broker sharing two cores with its tests.
func (k *ApacheKafka) jvmArgs() []string {
	args := []string{
		"-Xms32m", fmt.Sprintf("-Xmx%dm", k.cfg.HeapMB),
		"-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError",
		"-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + filepath.Join(k.cfg.Dir, "log4j2.properties"),
		"-cp", k.classpath,
	}
	if !k.cfg.FullJIT {
		args = append(args, "-XX:TieredStopAtLevel=1")
	}
	return args
}

// format runs Kafka's storage tool for every node at once, with one
// cluster id and, for SCRAM, the user.
func (k *ApacheKafka) format(ctx context.Context) error {
	// One that starts with '-' is taken by the storage tool for an option
	// ("--cluster-id: expected one argument"), in 1 of 64 runs; Kafka's
	// own ids never start with it either.
	var clusterID string
	for clusterID == "" || clusterID[0] == '-' {
		var id [16]byte
		rand.Read(id[:])
		clusterID = base64.RawURLEncoding.EncodeToString(id[:])
	}
	nodes := k.nodes()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, b := range nodes {
		if _, err := os.Stat(filepath.Join(b.dir, "data", "meta.properties")); err == nil && k.cfg.Persist {
			continue // formatted in an earlier run
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := append(k.jvmArgs(), "kafka.tools.StorageTool", "format",
				"--config", filepath.Join(b.dir, "server.properties"), "--cluster-id", clusterID)
			if m := k.cfg.SASL.Mechanism; strings.HasPrefix(m, "SCRAM-") {
				args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", m, k.cfg.SASL.User, k.cfg.SASL.Password))
			}
			cmd := exec.CommandContext(ctx, k.java, args...)
			cmd.Dir = b.dir
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("formatting %s's storage: %v\n%s", b.name(), err, tail(out, 4<<10))
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// name is how logs and errors call node b.
func (b *apacheBroker) name() string {
	if b.controllerOnly {
		return fmt.Sprintf("kafka controller %d", b.id)
	}
	return fmt.Sprintf("kafka broker %d", b.id)
}

// spawn starts node b's process; output is appended to its server.log.
func (k *ApacheKafka) spawn(b *apacheBroker) error {
	args := append(k.jvmArgs(), "kafka.Kafka", filepath.Join(b.dir, "server.properties"))
	p, err := startProc(b.name(), k.java, args, b.dir, "server.log", nil)
	if err != nil {
		return err
	}
	// The JVM exits 143 after its shutdown hooks ran on SIGTERM.
	p.termCodes = []int{143}
	b.mu.Lock()
	b.p, b.paused = p, false
	b.mu.Unlock()
	return nil
}

func (b *apacheBroker) proc() *proc {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.p
}

// waitBroker waits until broker b answers metadata over its INTERNAL
// listener and lists itself, which it does once the controller has
// registered and unfenced it.
func (k *ApacheKafka) waitBroker(ctx context.Context, b *apacheBroker) error {
	return b.proc().waitReady(ctx, func(ctx context.Context) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.internalAddr()), kgo.DialTimeout(time.Second))
		if err != nil {
			return err
		}
		defer cl.Close()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(rctx, cl.SeedBrokers()[0])
		if err != nil {
			return err
		}
		for _, rb := range resp.Brokers {
			if rb.NodeID == b.id {
				return nil
			}
		}
		return fmt.Errorf("broker %d not registered yet", b.id)
	})
}

// startController starts the dedicated controller and waits until its
// listener takes connections; the brokers, started next, wait for it to
// register them.
func (k *ApacheKafka) startController(ctx context.Context) error {
	if err := k.spawn(k.ctrl); err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(k.ctrl.ctrlPt))
	err := k.ctrl.proc().waitReady(ctx, func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	})
	if err != nil {
		k.ctrl.proc().kill()
	}
	return err
}

func (b *apacheBroker) internalAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.internal))
}
func (b *apacheBroker) clientAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.clientPort))
}

// Brokers returns the CLIENT listeners' "127.0.0.1:port" addresses, by node
// id (node 1 first). They stay the same across restarts.
func (k *ApacheKafka) Brokers() []string {
	var out []string
	for _, b := range k.brokers {
		out = append(out, b.clientAddr())
	}
	return out
}

// Nodes returns the brokers' node ids, 1 to N.
func (k *ApacheKafka) Nodes() []int32 {
	var out []int32
	for _, b := range k.brokers {
		out = append(out, b.id)
	}
	return out
}

// Controller returns the dedicated controller's node id, or 0 when every
// broker is a controller.
func (k *ApacheKafka) Controller() int32 {
	if k.ctrl == nil {
		return 0
	}
	return k.ctrl.id
}

// LogFile is node's log file: a broker's, or the dedicated controller's.
func (k *ApacheKafka) LogFile(node int32) string {
	if k.ctrl != nil && node == k.ctrl.id {
		return filepath.Join(k.ctrl.dir, "server.log")
	}
	return filepath.Join(k.cfg.Dir, fmt.Sprintf("broker-%d", node), "server.log")
}

func (k *ApacheKafka) broker(node int32) (*apacheBroker, error) {
	if node < 1 || int(node) > len(k.brokers) {
		return nil, fmt.Errorf("stack: no kafka broker %d: nodes are 1 to %d", node, len(k.brokers))
	}
	return k.brokers[node-1], nil
}

// Kill kills broker node (SIGKILL), as a crash would, and waits for it.
func (k *ApacheKafka) Kill(node int32) error {
	b, err := k.broker(node)
	if err != nil {
		return err
	}
	b.proc().kill()
	return nil
}

// Stop shuts broker node down gracefully (SIGTERM: leadership handed over,
// logs flushed) and waits for it; ctx's end kills it.
func (k *ApacheKafka) Stop(ctx context.Context, node int32) error {
	b, err := k.broker(node)
	if err != nil {
		return err
	}
	p := b.proc()
	if b.isPaused() {
		// A stopped JVM runs no shutdown hooks until it continues.
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT)
	}
	return p.stop(ctx)
}

// Start starts stopped or killed brokers again from their storage, on the
// same ports, and waits until each is registered again. They start
// together: a broker of a cluster whose quorum is down too needs the
// others to finish starting.
func (k *ApacheKafka) Start(ctx context.Context, nodes ...int32) error {
	var bs []*apacheBroker
	for _, node := range nodes {
		b, err := k.broker(node)
		if err != nil {
			return err
		}
		if p := b.proc(); p != nil && !p.exited() {
			return fmt.Errorf("stack: kafka broker %d is running; Stop or Kill it first", node)
		}
		bs = append(bs, b)
	}
	for _, b := range bs {
		if err := k.spawn(b); err != nil {
			return err
		}
	}
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = k.waitBroker(ctx, b); errs[i] != nil {
				b.proc().kill()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Restart stops broker node gracefully and starts it again.
func (k *ApacheKafka) Restart(ctx context.Context, node int32) error {
	if err := k.Stop(ctx, node); err != nil {
		return err
	}
	return k.Start(ctx, node)
}

// Pause stops broker node with SIGSTOP: its connections stay open but
// nothing answers, as in a long GC pause or a hung host. Resume ends it.
func (k *ApacheKafka) Pause(node int32) error { return k.signal(node, syscall.SIGSTOP, true) }

// Resume continues a paused broker node (SIGCONT).
func (k *ApacheKafka) Resume(node int32) error { return k.signal(node, syscall.SIGCONT, false) }

func (k *ApacheKafka) signal(node int32, sig syscall.Signal, paused bool) error {
	b, err := k.broker(node)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.p.exited() {
		return fmt.Errorf("stack: kafka broker %d is not running", node)
	}
	if err := syscall.Kill(b.p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("stack: signalling kafka broker %d: %w", node, err)
	}
	b.paused = paused
	return nil
}

func (b *apacheBroker) isPaused() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.paused
}

// Shutdown stops every broker gracefully, all at once, and waits, then
// the dedicated controller; ctx's end kills those still running. Use it before Close to keep the data
// consistent (`sluice dev`).
func (k *ApacheKafka) Shutdown(ctx context.Context) error {
	errs := make([]error, len(k.brokers))
	var wg sync.WaitGroup
	for i, b := range k.brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = k.Stop(ctx, b.id)
		}()
	}
	wg.Wait()
	if k.ctrl != nil {
		errs = append(errs, k.ctrl.proc().stop(ctx))
	}
	return errors.Join(errs...)
}

// Close kills every broker (SIGKILL, which ends a paused one too): the
// caller throws Dir away, and a graceful shutdown of a cluster whose
// quorum goes down with it can wait out its timeouts. Use Stop on each
// broker first to keep the data consistent. Close is idempotent.
func (k *ApacheKafka) Close() {
	k.adminMu.Lock()
	if k.admin != nil {
		k.admin.Close()
		k.admin = nil
	}
	k.adminMu.Unlock()
	for _, b := range k.nodes() { // the dedicated controller last
		if p := b.proc(); p != nil {
			p.kill()
		}
	}
}

// adminClient is a client over the INTERNAL listeners, made once.
func (k *ApacheKafka) adminClient() (*kgo.Client, error) {
	k.adminMu.Lock()
	defer k.adminMu.Unlock()
	if k.admin != nil {
		return k.admin, nil
	}
	var seeds []string
	for _, b := range k.brokers {
		seeds = append(seeds, b.internalAddr())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTimeout(2*time.Second), kgo.RequestRetries(20))
	if err != nil {
		return nil, err
	}
	k.admin = cl
	return cl, nil
}

// CreateTopic creates a topic with partitions partitions, replicated on
// min(brokers, 3), and waits until every running broker knows each
// partition's leader. If it exists, the error wraps kerr.TopicAlreadyExists.
func (k *ApacheKafka) CreateTopic(ctx context.Context, name string, partitions int32) error {
	return k.CreateTopicWith(ctx, name, partitions, nil)
}

// CreateTopicWith is CreateTopic with topic configs (min.insync.replicas,
// retention.ms, ...) over the brokers' defaults.
func (k *ApacheKafka) CreateTopicWith(ctx context.Context, name string, partitions int32, configs map[string]string) error {
	if partitions <= 0 {
		return fmt.Errorf("stack: topic %s: partitions must be positive, got %d", name, partitions)
	}
	cl, err := k.adminClient()
	if err != nil {
		return err
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = name, partitions, int16(k.replication())
	for _, key := range slices.Sorted(maps.Keys(configs)) {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = key, kmsg.StringPtr(configs[key])
		t.Configs = append(t.Configs, c)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("creating topic %s: %w", name, err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return fmt.Errorf("creating topic %s: %w", name, err)
	}
	return k.waitLeaders(ctx, name, partitions)
}

// waitLeaders waits until every running broker knows a leader for each of
// topic's partitions.
func (k *ApacheKafka) waitLeaders(ctx context.Context, name string, partitions int32) error {
	return k.waitTopic(ctx, name, func(tm *kmsg.MetadataResponseTopic) bool {
		if tm == nil || len(tm.Partitions) != int(partitions) {
			return false
		}
		for _, p := range tm.Partitions {
			if p.Leader < 0 {
				return false
			}
		}
		return true
	})
}

// DeleteTopic deletes a topic and waits until no running broker lists it.
func (k *ApacheKafka) DeleteTopic(ctx context.Context, name string) error {
	cl, err := k.adminClient()
	if err != nil {
		return err
	}
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 30000
	t := kmsg.NewDeleteTopicsRequestTopic()
	t.Topic = &name
	req.Topics = append(req.Topics, t)
	req.TopicNames = []string{name}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("deleting topic %s: %w", name, err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return fmt.Errorf("deleting topic %s: %w", name, err)
	}
	return k.waitTopic(ctx, name, func(tm *kmsg.MetadataResponseTopic) bool { return tm == nil })
}

// waitTopic polls every running broker's metadata for topic until done
// holds for each (tm is nil where the broker does not know the topic).
func (k *ApacheKafka) waitTopic(ctx context.Context, topic string, done func(tm *kmsg.MetadataResponseTopic) bool) error {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		all := true
		for _, b := range k.brokers {
			if p := b.proc(); p.exited() || b.isPaused() {
				continue
			}
			tm, err := k.topicMetadata(ctx, b, topic)
			if err != nil || !done(tm) {
				all = false
				break
			}
		}
		if all {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for topic %s on every broker: %w", topic, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// topicMetadata asks broker b alone about topic; nil if it does not know it.
func (k *ApacheKafka) topicMetadata(ctx context.Context, b *apacheBroker, topic string) (*kmsg.MetadataResponseTopic, error) {
	cl, err := k.adminClient()
	if err != nil {
		return nil, err
	}
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &topic
	req.Topics = append(req.Topics, rt)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, cl.Broker(int(b.id)))
	if err != nil {
		return nil, err
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic != nil && *t.Topic == topic {
			if t.ErrorCode == kerr.UnknownTopicOrPartition.Code {
				return nil, nil
			}
			if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
				return nil, err
			}
			return t, nil
		}
	}
	return nil, nil
}

// PartitionState is a partition's leader and in-sync replicas as a broker
// sees them.
type PartitionState struct {
	Leader      int32 // -1: none
	LeaderEpoch int32 // raised by every election, clean or unclean
	ISR         []int32
}

// Partition returns topic's partition's leader and in-sync replicas as the
// first running broker (by node id) knows them.
func (k *ApacheKafka) Partition(ctx context.Context, topic string, partition int32) (PartitionState, error) {
	var lastErr error = errors.New("no kafka broker is running")
	for _, b := range k.brokers {
		if p := b.proc(); p.exited() || b.isPaused() {
			continue
		}
		tm, err := k.topicMetadata(ctx, b, topic)
		if err != nil {
			lastErr = err
			continue
		}
		if tm == nil {
			return PartitionState{}, fmt.Errorf("stack: topic %s: %w", topic, kerr.UnknownTopicOrPartition)
		}
		for _, p := range tm.Partitions {
			if p.Partition == partition {
				return PartitionState{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, ISR: slices.Clone(p.ISR)}, nil
			}
		}
		return PartitionState{}, fmt.Errorf("stack: topic %s has no partition %d", topic, partition)
	}
	return PartitionState{}, lastErr
}
