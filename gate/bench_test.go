package gate_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/loadtest/openloop"
)

// The gate's own cost per job, without HTTP's: the handler called in
// process, producing to kfake, from parallel goroutines as concurrent
// requests would. See BENCHMARKS.md for the HTTP numbers.
//
//	go test ./gate -run '^$' -bench . -benchtime 5s
func benchHandler(b *testing.B, path string, body []byte, jobsPerRequest int) {
	k := newKafkaB(b)
	g := startGateB(b, k)
	h := g.Handler()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
			if rec.Code != http.StatusAccepted {
				b.Fatalf("%d %s", rec.Code, rec.Body)
			}
		}
	})
	b.ReportMetric(float64(b.N*jobsPerRequest)/b.Elapsed().Seconds(), "jobs/s")
}

func BenchmarkHandlerSingleJob(b *testing.B) {
	benchHandler(b, "/v1/topics/jobs/jobs", openloop.Envelope(1), 1)
}

func BenchmarkHandlerBatch100(b *testing.B) {
	benchHandler(b, "/v1/topics/jobs/jobs:batch", openloop.NDJSON(100), 100)
}
