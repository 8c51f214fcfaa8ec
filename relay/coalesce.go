package relay

import (
	"context"

	"github.com/sluicehq/sluice/internal/queue"
)

// coalescer merges the batches of a topic's partition consumers into one
// Enqueue call, group-commit style: it takes one batch, adds every batch
// already waiting, and sends them together. Redis runs a script call per
// Redis partition and call, and a call costs far more than a job in it; a
// consumer per Kafka partition trickling small batches would otherwise
// make a small call per Redis partition each. Under load the batches that
// wait while a call runs form the next one; when idle a batch goes at once.
type coalescer struct {
	enqueue func(ctx context.Context, items []queue.Item) ([]queue.Result, error)
	reqs    chan coalesceReq
	max     int // items per merged call, at most (a single batch may exceed it)
}

type coalesceReq struct {
	items []queue.Item
	reply chan coalesceReply
}

type coalesceReply struct {
	results []queue.Result
	err     error
}

func newCoalescer(max int, enqueue func(ctx context.Context, items []queue.Item) ([]queue.Result, error)) *coalescer {
	return &coalescer{enqueue: enqueue, reqs: make(chan coalesceReq), max: max}
}

// Enqueue enqueues items with whatever other batches are waiting, and
// returns this batch's results.
func (c *coalescer) Enqueue(ctx context.Context, items []queue.Item) ([]queue.Result, error) {
	reply := make(chan coalesceReply, 1)
	select {
	case c.reqs <- coalesceReq{items: items, reply: reply}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// The call runs on the coalescer's context, which ends with ours (the
	// topic's): it answers every request it took.
	r := <-reply
	return r.results, r.err
}

// run serves requests until ctx ends.
func (c *coalescer) run(ctx context.Context) {
	for {
		var first coalesceReq
		select {
		case first = <-c.reqs:
		case <-ctx.Done():
			return
		}
		reqs := []coalesceReq{first}
		n := len(first.items)
	more:
		for n < c.max {
			select {
			case r := <-c.reqs:
				reqs = append(reqs, r)
				n += len(r.items)
			default:
				break more
			}
		}
		items := first.items
		if len(reqs) > 1 {
			items = make([]queue.Item, 0, n)
			for _, r := range reqs {
				items = append(items, r.items...)
			}
		}
		results, err := c.enqueue(ctx, items)
		for _, r := range reqs {
			if err != nil {
				r.reply <- coalesceReply{err: err}
				continue
			}
			r.reply <- coalesceReply{results: results[:len(r.items)]}
			results = results[len(r.items):]
		}
	}
}
