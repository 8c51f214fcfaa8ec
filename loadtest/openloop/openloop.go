// Package openloop is the fixed-rate HTTP load of `sluice loadtest` and the
// gate benchmarks, in a package of its own so that the sluice binary links
// it without the scenarios' Kafka, Redis and histogram code
// (loadtest/scenario).
//
// Run sends HTTP requests at a fixed rate whatever the server's answer
// time (an open loop, as real clients do), and measures each request's
// latency from the moment it was due, not from when a free connection sent
// it, so a stalled server shows in the percentiles instead of slowing the
// load down ("coordinated omission").
package openloop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Config describes one fixed-rate run.
type Config struct {
	URL         string
	Body        []byte
	ContentType string
	Header      http.Header
	Rate        float64       // requests per second
	Duration    time.Duration // how long to send
	Conns       int           // connections, also the most requests in flight
	// MaxQueue bounds requests due but not yet sent; past it the run
	// counts them as dropped instead of growing without bound.
	MaxQueue int
}

// Report is what a Run measured.
type Report struct {
	Sent, OK, Dropped int
	Status            map[int]int // answers by status code; 0 for transport errors
	Elapsed           time.Duration
	P50, P90, P99     time.Duration
	P999, Max         time.Duration
}

// Rate is the rate of successful answers.
func (r Report) Rate() float64 { return float64(r.OK) / r.Elapsed.Seconds() }

func (r Report) String() string {
	return fmt.Sprintf("sent %d ok %d dropped %d in %s (%.0f ok/s); latency p50 %s p90 %s p99 %s p99.9 %s max %s; status %v",
		r.Sent, r.OK, r.Dropped, r.Elapsed.Round(time.Millisecond), r.Rate(),
		r.P50.Round(time.Microsecond), r.P90.Round(time.Microsecond), r.P99.Round(time.Microsecond),
		r.P999.Round(time.Microsecond), r.Max.Round(time.Microsecond), r.Status)
}

// Run runs cfg until its duration passed or ctx ended, then waits for
// the answers still due and reports.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.Conns <= 0 {
		return Report{}, errors.New("loadtest: rate, duration and conns must be positive")
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 100000
	}
	tr := &http.Transport{
		MaxIdleConns:        cfg.Conns,
		MaxIdleConnsPerHost: cfg.Conns,
		MaxConnsPerHost:     cfg.Conns,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	due := make(chan time.Time, cfg.MaxQueue)
	type result struct {
		status  int
		latency time.Duration
	}
	results := make([][]result, cfg.Conns)
	var wg sync.WaitGroup
	for w := range cfg.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for at := range due {
				status := send(ctx, client, cfg)
				results[w] = append(results[w], result{status, time.Since(at)})
			}
		}()
	}

	start := time.Now()
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	total := int(cfg.Rate * cfg.Duration.Seconds())
	dropped := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; i < total; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				i = total
				continue
			}
		}
		select {
		case due <- at:
		default:
			dropped++
		}
	}
	close(due)
	wg.Wait()

	rep := Report{Status: map[int]int{}, Elapsed: time.Since(start), Dropped: dropped}
	var lat []time.Duration
	for _, rs := range results {
		for _, r := range rs {
			rep.Sent++
			rep.Status[r.status]++
			if r.status >= 200 && r.status < 300 {
				rep.OK++
			}
			lat = append(lat, r.latency)
		}
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[min(int(p*float64(len(lat))), len(lat)-1)] }
		rep.P50, rep.P90, rep.P99, rep.P999, rep.Max = q(.5), q(.9), q(.99), q(.999), lat[len(lat)-1]
	}
	return rep, ctx.Err()
}

func send(ctx context.Context, client *http.Client, cfg Config) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(cfg.Body))
	if err != nil {
		return 0
	}
	req.ContentLength = int64(len(cfg.Body))
	for k, v := range cfg.Header {
		req.Header[k] = v
	}
	if cfg.ContentType != "" {
		req.Header.Set("Content-Type", cfg.ContentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Envelope returns a job envelope of about size bytes, like the gate
// benchmarks post: an e-mail job with an HTML-ish payload.
func Envelope(i int) []byte {
	return []byte(`{"type":"email.send","group":"campaign-` + strconv.Itoa(i%10) + `","tenant":"acme","payload":{"to":"user` +
		strconv.Itoa(i) + `@example.test","subject":"Hello <there> & welcome","body":"0123456789012345678901234567890123456789012345678901234567890123456789"}}`)
}

// NDJSON returns n envelopes, one per line.
func NDJSON(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		b.Write(Envelope(i))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// BareHandler reads a request body and answers 202 with a gate-sized answer,
// doing nothing else: the ceiling of an HTTP server on this machine, measured
// beside the gate so that reports compare ratios from one run.
func BareHandler() http.Handler {
	answer := []byte(`{"id":"01M7Z14M1GJ898AJ46WZHTM0B9","topic":"jobs","partition":5,"offset":12345}` + "\n")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		w.Write(answer)
	})
}
