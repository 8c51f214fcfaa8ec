package gate

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/internal/queue"
)

// serveJobLookup answers GET /v1/topics/{topic}/jobs/{id}: where the job
// is, from what Redis holds (queue.Pool.FindJob, docs/gate.md). The query
// may name the job's group (which places it) and its Kafka position, as
// the gate answered its POST (partition and offset), which tells a job
// still in Kafka from one done without a record. 404 carries the same
// answer with state not-found.
func (g *Gate) serveJobLookup(x *exchange) {
	allows, ok := g.redisRoute(x, "jobs", http.MethodGet)
	if !ok {
		return
	}
	q := x.r.URL.Query()
	l, err := queue.ParseJobLookup(x.r.PathValue("topic"), x.r.PathValue("id"), q.Get("group"), q.Get("partition"), q.Get("offset"))
	if err != nil {
		x.fail(http.StatusBadRequest, "%v", err)
		return
	}
	if !allows(l.Topic) {
		x.fail(http.StatusForbidden, "this token may not read topic %q", l.Topic)
		return
	}
	ctx, cancel := context.WithTimeout(x.r.Context(), g.cfg.ProduceTimeout)
	defer cancel()
	w, err := g.groups.FindJob(ctx, l)
	if err != nil {
		g.setRetryAfter(x)
		x.fail(http.StatusServiceUnavailable, "Redis is unavailable, retry later: %v", err)
		return
	}
	code := http.StatusOK
	if w.Where == queue.WhereNotFound {
		code = http.StatusNotFound
	}
	x.json(code, w.View(l))
}
