package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestDevWithApacheKafka: `sluice dev --kafka apache` runs the pipeline on a
// real broker from bin/kafka, says so in its banner, runs the printed curl's
// job end to end, and keeps the broker's data across a restart (the storage
// is formatted once).
func TestDevWithApacheKafka(t *testing.T) {
	testenv.SkipWithoutApacheKafka(t)
	cfg := devOnFreePorts(t, filepath.Join(t.TempDir(), ".sluice"))
	cfg.Kafka = devKafkaApache
	start := time.Now()
	d := startDev(t, &cfg)
	t.Logf("sluice dev --kafka apache ready in %s", time.Since(start).Round(time.Millisecond))
	banner := d.out.String()
	if !strings.Contains(banner, "(Apache Kafka 4.") || strings.Contains(banner, "(kfake)") {
		t.Fatalf("the banner does not say which Kafka runs:\n%s", banner)
	}
	status, body := curlFromBanner(t, banner)
	if status != http.StatusAccepted {
		t.Fatalf("printed curl: %d %s", status, body)
	}
	var partition int32
	var offset int64
	var id string
	if _, err := fmt.Sscanf(string(body), `{"id":%q,"topic":"jobs","partition":%d,"offset":%d}`, &id, &partition, &offset); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	defer rdb.Close()
	layout := queue.Keyspace{Stage: "dev", Partitions: cfg.RedisPartitions}
	testenv.WaitFor(t, 60*time.Second, "the job to be relayed and run", func() bool {
		done := 0
		for p := range layout.Partitions {
			n, _ := rdb.HGet(context.Background(), layout.Keys(queue.Queue{Topic: "jobs", Part: p}).Stats(), "funnel:jobs:completed").Int()
			done += n
		}
		return done == 1
	})

	d.stop(t)
	if err := stack.CheckAddrFree(cfg.KafkaAddr, "kafka after stop", "-"); err != nil {
		t.Fatalf("the broker still listens after sluice dev stopped: %v", err)
	}
	startDev(t, &cfg)
	if v := readBack(t, cfg.KafkaAddr, "jobs", partition, offset); !bytes.Contains(v, []byte(id)) {
		t.Fatalf("after a restart the record at jobs/%d/%d is %s, want job %s", partition, offset, v, id)
	}
}
