package client_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/worker"
)

// welcome is a payload type that names its job type: producer and worker
// share it, and no string.
type welcome struct {
	To string `json:"to"`
}

func (welcome) Kind() string { return "welcome.send" }

// TestKindIsTheJobTypeAtBothEnds: a welcome enqueued with the type "",
// alone, in a batch and in a bulk group, through a real gate and relay,
// reaches the worker's handler registered with the type "", as job type
// welcome.send, payload decoded.
func TestKindIsTheJobTypeAtBothEnds(t *testing.T) {
	b := newBed(t, nil)
	c := b.client(t, quick)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cfg := worker.DefaultConfig()
	cfg.Stage, cfg.RedisAddr, cfg.Partitions = stage, b.redis.Addr(), b.layout.Partitions
	w, err := worker.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	type seen struct{ typ, to, group string }
	got := make(chan seen, 10)
	worker.HandleFunc(w, "", func(_ context.Context, j *worker.TypedJob[welcome]) error {
		got <- seen{j.Type, j.Payload.To, j.Group}
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()

	if _, err := c.Enqueue(ctx, topic, "", welcome{To: "ada"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueBatch(ctx, topic, []client.Job{{Payload: welcome{To: "bob"}}}); err != nil {
		t.Fatal(err)
	}
	g, err := c.EnqueueGroup(ctx, topic, "", []any{welcome{To: "cy"}, welcome{To: "di"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"ada": "", "bob": "", "cy": g.Group, "di": g.Group}
	for range want {
		select {
		case s := <-got:
			group, ok := want[s.to]
			if !ok || s.typ != "welcome.send" || s.group != group {
				t.Fatalf("handler got %+v: want type welcome.send, one of %v with its group", s, want)
			}
			delete(want, s.to)
		case <-ctx.Done():
			t.Fatalf("the handler never got %v", want)
		}
	}
}

// TestAJobWithoutATypeIsRefusedBeforeSending: no type and no Kind() is
// an error naming the fix, and so is a group whose items' Kinds differ;
// nothing is sent (the client's gate does not exist).
func TestAJobWithoutATypeIsRefusedBeforeSending(t *testing.T) {
	c, err := client.New(client.Config{URL: "http://127.0.0.1:1", Retry: client.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Enqueue":      func() error { _, err := c.Enqueue(ctx, topic, "", map[string]string{"to": "ada"}); return err },
		"EnqueueBatch": func() error { _, err := c.EnqueueBatch(ctx, topic, []client.Job{{Payload: 1}}); return err },
		"EnqueueGroup": func() error { _, err := c.EnqueueGroup(ctx, topic, "", []any{welcome{}, 2}); return err },
	} {
		err := call()
		var ce *client.Error
		if err == nil || errors.As(err, &ce) || !strings.Contains(err.Error(), "Kind() string method") || strings.Contains(err.Error(), "sends") {
			t.Errorf("%s without a type: %v, want an error before sending that names Kind()", name, err)
		}
	}
	_, err = c.EnqueueGroup(ctx, topic, "", []any{welcome{}, farewell{}})
	if err == nil || !strings.Contains(err.Error(), `item 0 is "welcome.send", item 1 (client_test.farewell) "farewell"`) {
		t.Errorf("a group of two Kinds: %v, want an error naming both", err)
	}
}

type farewell struct{}

func (farewell) Kind() string { return "farewell" }
