// Command bulkgroup submits a bulk group with the Go client and receives
// its callback: it listens for the coordinator's POST, submits the group
// with that URL as its callback, prints the group's status while it runs,
// and prints the callback's summary when it arrives. Against `sluice dev`
// (make run):
//
//	go run ./examples/bulkgroup
//	go run ./examples/bulkgroup --items 1000 --listen 127.0.0.1:9000
//
// The coordinator must reach --listen: with sluice dev on this machine,
// a loopback address does.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/examples/internal/example"
)

func main() { example.Main("bulkgroup", run) }

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bulkgroup", flag.ContinueOnError)
	gate := example.GateFlags(fs)
	topic := fs.String("topic", "jobs", "topic to submit the group to")
	items := fs.Int("items", 100, "items in the group")
	listen := fs.String("listen", "127.0.0.1:0", "address of the callback receiver (port 0: any free port)")
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait for the callback")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := gate.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()

	// The receiver: the coordinator POSTs the group's results once, and
	// again only if we do not answer 2xx.
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	callbacks := make(chan client.GroupCallback, 1)
	// A receiver faces the network: bound how long a connection may hold
	// it (headers, body, answer, keep-alive), as sluice's own servers do.
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var cb client.GroupCallback
		if err := json.NewDecoder(r.Body).Decode(&cb); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest) // the coordinator retries
			return
		}
		w.WriteHeader(http.StatusNoContent)
		select {
		case callbacks <- cb:
		default: // a redelivery: the first one is being handled
		}
	})
	go srv.Serve(ln)
	defer srv.Close()
	callbackURL := "http://" + ln.Addr().String() + "/sluice/done"
	fmt.Fprintf(out, "receiving the callback at %s\n", callbackURL)

	payloads := make([]any, *items)
	for i := range payloads {
		payloads[i] = map[string]any{"to": fmt.Sprintf("reader-%d@example.com", i), "issue": 42}
	}
	g, err := c.EnqueueGroup(ctx, *topic, "newsletter", payloads, client.Callback(callbackURL), client.Priority(1))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "group %s: %d jobs in Kafka; status at %s%s\n", g.Group, g.Count, gate.URL(), g.Status)

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case cb := <-callbacks:
			fmt.Fprintf(out, "callback: group %s: %d items, %d done, %d dead, %d cancelled\n", cb.Group, len(cb.Items), cb.Done, cb.Dead, cb.Cancelled)
			if cb.Group != g.Group || int64(len(cb.Items)) != g.Count {
				return fmt.Errorf("callback for %s with %d items, want %s with %d", cb.Group, len(cb.Items), g.Group, g.Count)
			}
			return nil
		case <-tick.C:
			st, err := c.GroupStatus(ctx, *topic, g.Group)
			var e *client.Error
			switch {
			case errors.As(err, &e) && e.Status == http.StatusNotFound:
				fmt.Fprintln(out, "status: not in Redis yet")
			case err != nil:
				return err
			default:
				fmt.Fprintf(out, "status: %s, %d of %d done\n", st.State, st.Done, st.Total)
			}
		case <-ctx.Done():
			return fmt.Errorf("no callback for group %s: %w", g.Group, ctx.Err())
		}
	}
}
