package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/funnel"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

func init() {
	cli.Describe("stats", "Prints the stage funnel per topic: accepted by the gate, produced to Kafka, relayed, deduplicated,\n"+
		"dead-lettered at the relay, dequeued, completed, retried, dead; each gap explained (answered 5xx, waiting in\n"+
		"Kafka, held in Redis) and a gap that nothing explains flagged. Then each Redis partition's ready, delayed,\n"+
		"in-flight and dead jobs against its counters, and the heartbeat canaries with their alerts.\n"+
		"Reads Redis (the counters live there, across restarts), Kafka (the relay's lag) and the gates' /metrics.\n"+
		"Exits 1 when something is unexplained or a canary is late. -o json for scripts. See docs/stats.md.\n"+
		"Two modes: with --redis-addr (or --direct) it reads the stores itself, which works while the coordinator is\n"+
		"down; without, it asks the admin API (--admin-url, --admin-token; docs/admin.md), which needs no\n"+
		"store addresses.")
}

type statsFlags struct {
	redis         queue.StageRedis
	kafka         kafka.Config
	consumerGroup string
	gateMetrics   cli.ListFlag
	gateTLS       tlsfiles.Client
	output        string
	timeout       time.Duration
	api, direct   bool
	admin         adminFlags
}

func (f *statsFlags) register(fs *flag.FlagSet) {
	f.redis = queue.DefaultStageRedis()
	f.redis.RegisterFlags(fs)
	f.kafka.Register(fs, "sluice-stats")
	fs.StringVar(&f.consumerGroup, "consumer-group", kafka.RelayConsumerGroup, "the relays' --consumer-group (the lag of <group>.<topic> is read); needs --kafka-brokers")
	fs.Var(&f.gateMetrics, "gate-metrics", "the gates' /metrics URLs, comma-separated: every gate, for the accepted and produced counts")
	f.gateTLS.Register(fs, "gate-metrics", "the gate")
	fs.StringVar(&f.output, "o", "text", "output: text (or table) or json")
	cli.DurationVar(fs, &f.timeout, "timeout", 10*time.Second, "time limit of the whole read")
	fs.BoolVar(&f.api, "api", false, "ask the admin API (--admin-url: the console's), the default unless --redis-addr is given")
	fs.BoolVar(&f.direct, "direct", false, "read Redis, Kafka and the gates directly (works while the coordinator is down), the default when --redis-addr is given")
	f.admin.registerConn(fs, "the admin API (sluice coordinator's or sluice console's --listen, https:// when it serves HTTPS), for the API mode (SLUICE_ADMIN_URL)")
}

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	var f statsFlags
	f.register(fs)
	if err := parse(fs, "stats", args, stdout); err != nil {
		return err
	}
	if f.output == "table" {
		f.output = "text"
	}
	if f.output != "text" && f.output != "json" {
		return fmt.Errorf("-o %q: want text or json", f.output)
	}
	if f.api && f.direct {
		return fmt.Errorf("--api and --direct: choose one")
	}
	// Direct when asked, or when Redis's address is given (as sluice dev's
	// banner and every script before the admin API did); else the API.
	direct := f.direct
	if !f.api && !direct {
		fs.Visit(func(fl *flag.Flag) {
			if fl.Name == "redis-addr" || fl.Name == "redis-partition-addrs" || fl.Name == "redis-cluster" {
				direct = true
			}
		})
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	var r funnel.Report
	if direct {
		in, err := f.gather(ctx)
		if err != nil {
			return err
		}
		r = funnel.Build(in)
	} else {
		// The store flags say nothing to the API: the coordinator reads
		// with its own. Said, so that nobody believes they were used.
		var ignored []string
		fs.Visit(func(fl *flag.Flag) {
			switch fl.Name {
			case "stage", "redis-partitions", "kafka-brokers", "consumer-group", "gate-metrics":
				ignored = append(ignored, "--"+fl.Name)
			default:
				if strings.HasPrefix(fl.Name, "gate-metrics-tls") {
					ignored = append(ignored, "--"+fl.Name)
				}
			}
		})
		if len(ignored) > 0 {
			fmt.Fprintf(stderr, "sluice stats: %s ignored: the admin API reads with its console's own flags (give --redis-addr or --direct to read directly)\n", strings.Join(ignored, ", "))
		}
		f.admin.output, f.admin.timeout = "json", f.timeout
		c, err := f.admin.client()
		if err != nil {
			return err
		}
		if err := c.Get(ctx, "/api/v1/stats", &r); err != nil {
			err = explain(err)
			var un *admin.UnreachableError
			if errors.As(err, &un) {
				err = fmt.Errorf("%w\n  Or read the stores directly: sluice stats --redis-addr <host:port> (--direct)", err)
			}
			return err
		}
	}
	if f.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else if err := funnel.Write(stdout, r); err != nil {
		return err
	}
	if len(r.Problems) > 0 {
		return errReported
	}
	return nil
}

// gateMetricsTLSSettings name the flags that mend a TLS failure reading
// the gates' /metrics.
var gateMetricsTLSSettings = tlsfiles.ClientSettings{
	CAFile:     "--gate-metrics-tls-ca-file",
	CertFile:   "--gate-metrics-tls-cert-file and --gate-metrics-tls-key-file",
	ServerName: "--gate-metrics-tls-server-name",
}

// gather reads the report's inputs directly; Kafka and the gates are
// optional, and a failure to read them is reported in the output, not
// fatal. Redis is the report's backbone: without it there is nothing to
// say.
func (f *statsFlags) gather(ctx context.Context) (funnel.Input, error) {
	pool, err := redisPool(f.redis)
	if err != nil {
		return funnel.Input{}, err
	}
	defer pool.Close()
	src := funnel.Sources{ConsumerGroup: f.consumerGroup, GateMetrics: f.gateMetrics, KafkaTimeout: f.timeout / 2}
	tc, err := f.gateTLS.Config()
	if err != nil {
		return funnel.Input{}, fmt.Errorf("--gate-metrics-tls-ca-file, --gate-metrics-tls-cert-file, --gate-metrics-tls-key-file: %w", err)
	}
	if tc != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tc
		src.GateHTTP = &http.Client{Transport: t}
	}
	if len(f.kafka.Brokers) > 0 {
		src.Kafka = &f.kafka
	}
	in, err := funnel.Gather(ctx, pool, src, time.Now())
	var re *funnel.RedisError
	if errors.As(err, &re) {
		return in, fmt.Errorf("%w (check --redis-addr, --redis-partitions and --stage)", err)
	}
	if err != nil {
		return in, fmt.Errorf("--gate-metrics %w", gateMetricsTLSSettings.Explain(err))
	}
	return in, nil
}
