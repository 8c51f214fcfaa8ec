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
	if x.r.Method != http.MethodGet {
		x.w.Header().Set("Allow", "GET")
		x.fail(http.StatusMethodNotAllowed, "method %s not allowed: use GET", x.r.Method)
		return
	}
	allows, status, reason := g.auth.Authenticate(x.r)
	if status != 0 {
		x.w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		x.fail(status, "%s", reason)
		return
	}
	if g.groups == nil {
		x.fail(http.StatusNotImplemented, "this gate has no Redis to look jobs up in: start it with --redis-addr")
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
