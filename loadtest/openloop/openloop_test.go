package openloop

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestOpenLoopSendsAtTheRateAndCountsAnswers(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%10 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		BareHandler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	rep, err := Run(context.Background(), Config{
		URL: srv.URL, Body: Envelope(1), Rate: 500, Duration: 400 * time.Millisecond, Conns: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != 200 || rep.OK != 180 || rep.Status[202] != 180 || rep.Status[503] != 20 || rep.Dropped != 0 {
		t.Fatalf("report %s", rep)
	}
	if rep.P50 <= 0 || rep.P99 < rep.P50 || rep.Max < rep.P99 {
		t.Fatalf("percentiles out of order: %s", rep)
	}
}

// A server that stalls shows in the latency of the requests that were due
// meanwhile, not only in the one that was sent.
func TestOpenLoopMeasuresFromDueTime(t *testing.T) {
	stall := make(chan struct{})
	var first atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(false, true) {
			<-stall
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	go func() {
		time.Sleep(200 * time.Millisecond) // the stall being measured, not synchronisation
		close(stall)
	}()
	rep, err := Run(context.Background(), Config{
		URL: srv.URL, Rate: 200, Duration: 300 * time.Millisecond, Conns: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	// With one connection, every request due during the 200 ms stall
	// waited for it: the median is far above the server's own time.
	if rep.Sent != 60 || rep.P50 < 50*time.Millisecond {
		t.Fatalf("report %s", rep)
	}
}
