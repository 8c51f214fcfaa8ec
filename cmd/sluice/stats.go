package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/internal/canary"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/funnel"
	"github.com/sluicehq/sluice/internal/kafka"
)

func init() {
	cli.Describe("stats", "Prints the stage funnel per topic: accepted by the gate, produced to Kafka, relayed, deduplicated,\n"+
		"dead-lettered at the relay, dequeued, completed, retried, dead; each gap explained (answered 5xx, waiting in\n"+
		"Kafka, held in Redis) and a gap that nothing explains flagged. Then each Redis partition's ready, delayed,\n"+
		"in-flight and dead jobs against its counters, and the heartbeat canaries with their alerts.\n"+
		"Reads Redis (the counters live there, across restarts), Kafka (the relay's lag) and the gates' /metrics.\n"+
		"Exits 1 when something is unexplained or a canary is late. -o json for scripts. See docs/stats.md.")
}

type statsFlags struct {
	redis         redisFlags
	kafka         kafka.Config
	consumerGroup string
	gateMetrics   cli.ListFlag
	output        string
	timeout       time.Duration
}

func (f *statsFlags) register(fs *flag.FlagSet) {
	f.redis.register(fs)
	f.kafka.Register(fs, "sluice-stats")
	fs.StringVar(&f.consumerGroup, "consumer-group", "sluice-relay", "the relays' --consumer-group (the lag of <group>.<topic> is read); needs --kafka-brokers")
	fs.Var(&f.gateMetrics, "gate-metrics", "the gates' /metrics URLs, comma-separated: every gate, for the accepted and produced counts")
	fs.StringVar(&f.output, "o", "text", "output: text or json")
	cli.DurationVar(fs, &f.timeout, "timeout", 10*time.Second, "time limit of the whole read")
}

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	var f statsFlags
	f.register(fs)
	if err := parse(fs, "stats", args, stdout); err != nil {
		return err
	}
	if f.output != "text" && f.output != "json" {
		return fmt.Errorf("-o %q: want text or json", f.output)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	in, err := f.gather(ctx)
	if err != nil {
		return err
	}
	r := funnel.Build(in)
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

// gather reads the report's inputs; Kafka and the gates are optional, and
// a failure to read them is reported in the output, not fatal. Redis is
// the report's backbone: without it there is nothing to say.
func (f *statsFlags) gather(ctx context.Context) (funnel.Input, error) {
	in := funnel.Input{Now: time.Now()}
	pool, err := f.redis.pool()
	if err != nil {
		return in, err
	}
	defer pool.Close()
	for p := range f.redis.partitions {
		pf, err := pool.Funnel(ctx, p)
		if err != nil {
			return in, fmt.Errorf("Redis: %w (check --redis-addr, --redis-partitions and --stage)", err)
		}
		in.Partitions = append(in.Partitions, pf)
	}
	if in.CanarySettings, in.CanaryMonitor, in.CanaryRecords, err = canary.Read(ctx, pool); err != nil {
		return in, fmt.Errorf("Redis: %w", err)
	}
	topics := map[string]bool{}
	for _, pf := range in.Partitions {
		for t := range pf.Stages {
			topics[t] = true
		}
	}
	if len(f.gateMetrics) > 0 {
		in.Gate = map[string]map[string]float64{}
		for _, u := range f.gateMetrics {
			if err := scrapeGateJobs(ctx, u, in.Gate); err != nil {
				return in, fmt.Errorf("--gate-metrics %s: %w", u, err)
			}
		}
		for t := range in.Gate {
			topics[t] = true
		}
	}
	if len(f.kafka.Brokers) > 0 {
		in.KafkaLag, in.KafkaErr = f.lag(topics)
	}
	return in, nil
}

func (f *statsFlags) lag(topics map[string]bool) (map[string]int64, string) {
	sc, err := f.kafka.Sarama()
	if err != nil {
		return nil, err.Error()
	}
	sc.Net.DialTimeout = f.timeout / 2
	client, err := sarama.NewClient(f.kafka.Brokers, sc)
	if err != nil {
		return nil, fmt.Sprintf("Kafka %v: %v", f.kafka.Brokers, err)
	}
	defer client.Close()
	out := map[string]int64{}
	for t := range topics {
		total, _, err := kafka.Lag(client, f.consumerGroup+"."+t, t)
		if err != nil {
			return out, fmt.Sprintf("Kafka lag of %s: %v", t, err)
		}
		out[t] = total
	}
	return out, ""
}

var gateJobsLine = regexp.MustCompile(`^sluice_gate_jobs_total\{([^}]*)\} (\S+)`)
var label = regexp.MustCompile(`(\w+)="([^"]*)"`)

// scrapeGateJobs adds a gate's sluice_gate_jobs_total to into, by topic and
// outcome.
func scrapeGateJobs(ctx context.Context, url string, into map[string]map[string]float64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := gateJobsLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range label.FindAllStringSubmatch(m[1], -1) {
			labels[l[1]] = l[2]
		}
		t := labels["topic"]
		if into[t] == nil {
			into[t] = map[string]float64{}
		}
		into[t][labels["outcome"]] += v
	}
	return sc.Err()
}
