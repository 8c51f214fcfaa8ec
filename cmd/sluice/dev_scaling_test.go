package main

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// sluice dev's coordinator runs the scaler: it sees the dev worker's
// consumer of every partition, at the worker's pool size as the base.
func TestDevCoordinatorScalesTheDevWorker(t *testing.T) {
	cfg := devOnFreePorts(t, filepath.Join(t.TempDir(), ".sluice"))
	cfg.RedisPartitions = 2
	startDev(t, &cfg)
	metrics := func() string {
		resp, err := http.Get("http://" + cfg.CoordinatorAddr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	value := func(text, name string) float64 {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(text)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	testenv.WaitFor(t, 20*time.Second, "the scaler to see the dev worker on both partitions", func() bool {
		text := metrics()
		for _, p := range []string{"0", "1"} {
			if value(text, `sluice_coordinator_scaling_consumers{partition="`+p+`"}`) != 1 ||
				value(text, `sluice_coordinator_scaling_workers{partition="`+p+`"}`) != 10 ||
				value(text, `sluice_coordinator_scaling_target_workers{partition="`+p+`"}`) != 10 {
				return false
			}
		}
		return true
	})
}
