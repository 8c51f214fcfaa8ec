package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/stack"
)

func init() {
	cli.Describe("dev", "Runs the whole pipeline on this machine with embedded defaults: Kafka in-process (kfake, persisted under --dir),\n"+
		"a redis-server child with AOF, a Consul dev agent child, and the gate without authentication.\n"+
		"Ctrl-C or SIGTERM stops everything; jobs survive a restart.")
}

type devConfig struct {
	Dir            string
	GateAddr       string
	KafkaAddr      string
	RedisAddr      string
	ConsulAddr     string
	Topic          string
	Partitions     int
	RedisMaxMemory string
	StopTimeout    time.Duration
	Pprof          bool
	Logging        cli.Logging
}

func (c *devConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.Dir, "dir", ".sluice", "directory for Kafka, Redis and Consul data and logs")
	fs.StringVar(&c.GateAddr, "gate-addr", "127.0.0.1:8080", "gate HTTP address")
	fs.StringVar(&c.KafkaAddr, "kafka-addr", "127.0.0.1:9092", "Kafka (kfake) broker address")
	fs.StringVar(&c.RedisAddr, "redis-addr", "127.0.0.1:6390", "Redis address")
	fs.StringVar(&c.ConsulAddr, "consul-addr", "127.0.0.1:8500", "Consul HTTP address")
	fs.StringVar(&c.Topic, "topic", "jobs", "job topic to create (with its .retry and .dlq topics)")
	fs.IntVar(&c.Partitions, "partitions", 8, "partitions of the job topic")
	fs.StringVar(&c.RedisMaxMemory, "redis-maxmemory", "256mb", "Redis maxmemory (policy noeviction)")
	cli.DurationVar(fs, &c.StopTimeout, "stop-timeout", 15*time.Second, "how long each part may take to stop")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve Go's profiler under the gate's /debug/pprof/")
	c.Logging.Register(fs)
	fs.Lookup("log-format").DefValue = "text"
	c.Logging.Format = "text"
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	var cfg devConfig
	cfg.register(fs)
	ctx, log, stop, err := start(ctx, fs, "dev", &cfg.Logging, args, stdout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	return devStack(ctx, cfg, log, stdout, nil)
}

// devStack starts every component, prints where they are, waits for ctx or a
// component's death, and stops them all in reverse order. ready, if not nil,
// is called once everything is up.
func devStack(ctx context.Context, cfg devConfig, log *slog.Logger, stdout io.Writer, ready func()) (err error) {
	// Refuse taken ports before starting anything, with the flag to change.
	for _, p := range []struct{ addr, what, flag string }{
		{cfg.GateAddr, "gate", "--gate-addr"},
		{cfg.KafkaAddr, "kafka", "--kafka-addr"},
		{cfg.RedisAddr, "redis", "--redis-addr"},
		{cfg.ConsulAddr, "consul", "--consul-addr"},
	} {
		if err := stack.CheckAddrFree(p.addr, p.what, p.flag); err != nil {
			return err
		}
	}
	if cfg.Partitions < 1 {
		return errors.New("--partitions must be at least 1")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return err
	}

	// Stop what started, newest first, whatever happens below.
	var stops []func(context.Context) error
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			sctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout)
			if serr := stops[i](sctx); serr != nil {
				log.Error("stopping", "err", serr)
				err = errors.Join(err, serr)
			}
			cancel()
		}
		log.Info("sluice dev stopped")
	}()
	startCtx, cancelStart := context.WithTimeout(ctx, time.Minute)
	defer cancelStart()

	_, kport, err := net.SplitHostPort(cfg.KafkaAddr)
	if err != nil {
		return fmt.Errorf("--kafka-addr %q: %w", cfg.KafkaAddr, err)
	}
	port, err := strconv.Atoi(kport)
	if err != nil {
		return fmt.Errorf("--kafka-addr %q: port: %w", cfg.KafkaAddr, err)
	}
	kafka, err := stack.StartKafka(startCtx, stack.KafkaConfig{
		Ports:   []int{port},
		DataDir: filepath.Join(dir, "kafka"),
		Topics: map[string]int32{
			cfg.Topic:            int32(cfg.Partitions),
			cfg.Topic + ".retry": int32(cfg.Partitions),
			cfg.Topic + ".dlq":   1,
		},
	})
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	stops = append(stops, func(context.Context) error { kafka.Close(); return nil })
	log.Info("kafka up", "addr", cfg.KafkaAddr, "data", filepath.Join(dir, "kafka"))

	redis, err := stack.StartRedis(startCtx, stack.RedisConfig{
		Addr: cfg.RedisAddr, Dir: filepath.Join(dir, "redis"), AOF: true, MaxMemory: cfg.RedisMaxMemory,
	})
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	stops = append(stops, redis.Stop)
	log.Info("redis up", "addr", cfg.RedisAddr, "data", filepath.Join(dir, "redis"))

	consul, err := stack.StartConsul(startCtx, stack.ConsulConfig{HTTPAddr: cfg.ConsulAddr, Dir: filepath.Join(dir, "consul")})
	if err != nil {
		return fmt.Errorf("consul: %w", err)
	}
	stops = append(stops, consul.Stop)
	log.Info("consul up", "addr", cfg.ConsulAddr)

	// The gate, in-process. Its own context ends first on shutdown, so it
	// drains requests while Kafka is still up.
	var gcfg gate.Config
	gfs := flag.NewFlagSet("gate", flag.ContinueOnError)
	gcfg.Register(gfs)
	gcfg.Listen = cfg.GateAddr
	gcfg.Kafka.Brokers = []string{cfg.KafkaAddr}
	gcfg.AllowNoAuth = true
	gcfg.DrainTimeout = cfg.StopTimeout
	gcfg.Pprof = cfg.Pprof
	gateLn, err := net.Listen("tcp", cfg.GateAddr)
	if err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	g, err := gate.New(startCtx, gcfg, log.With("part", "gate"))
	if err != nil {
		gateLn.Close()
		return fmt.Errorf("gate: %w", err)
	}
	gateCtx, stopGate := context.WithCancel(context.Background())
	gateDone := make(chan error, 1)
	go func() { gateDone <- g.Serve(gateCtx, gateLn) }()
	stops = append(stops, func(sctx context.Context) error {
		stopGate()
		select {
		case err := <-gateDone:
			return err
		case <-sctx.Done():
			return fmt.Errorf("gate did not stop in time: %w", sctx.Err())
		}
	})
	cancelStart()

	printBanner(stdout, cfg, dir)
	if ready != nil {
		ready()
	}

	select {
	case <-ctx.Done():
		return nil
	case err := <-gateDone:
		gateDone <- err // for the stop function
		return fmt.Errorf("gate stopped: %v", err)
	case <-redis.Exited():
		return fmt.Errorf("redis-server exited unexpectedly; see %s", filepath.Join(dir, "redis", "redis.log"))
	case <-consul.Exited():
		return fmt.Errorf("consul exited unexpectedly; see %s", filepath.Join(dir, "consul", "consul.log"))
	}
}

func printBanner(w io.Writer, cfg devConfig, dir string) {
	gateURL := "http://" + cfg.GateAddr
	fmt.Fprintf(w, `
sluice dev is running (data in %s). Ctrl-C stops everything; jobs survive a restart.

  gate     %s   (no authentication: development only)
  metrics  %s/metrics   health %s/healthz   ready %s/readyz
  kafka    %s   topic %q with %d partitions, plus %s.retry and %s.dlq (kfake)
  redis    %s   (AOF on; maxmemory %s)
  consul   http://%s   (dev agent; KV starts empty on each start)

Enqueue a job:
  curl -sS -X POST %s/v1/topics/%s/jobs -H 'Content-Type: application/json' \
    -d '{"type":"hello","payload":{"greeting":"<hi> & welcome"}}'

`, dir, gateURL, gateURL, gateURL, gateURL, cfg.KafkaAddr, cfg.Topic, cfg.Partitions, cfg.Topic, cfg.Topic,
		cfg.RedisAddr, cfg.RedisMaxMemory, cfg.ConsulAddr, gateURL, cfg.Topic)
	if f, ok := w.(*os.File); ok {
		f.Sync()
	}
}
