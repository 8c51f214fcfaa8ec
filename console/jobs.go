package console

import (
	"net/http"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/queue"
)

// jobGet answers GET /api/v1/topics/{topic}/jobs/{id}: where the job is,
// the gate's lookup answer (queue.JobView, docs/gate.md), 200 whatever the
// state, not-found included, for an operator reads the note either way.
func (con *Console) jobGet(r *http.Request, _ admin.Role) (any, error) {
	q := r.URL.Query()
	l, err := queue.ParseJobLookup(r.PathValue("topic"), r.PathValue("id"), q.Get("group"), q.Get("partition"), q.Get("offset"))
	if err != nil {
		return nil, badRequest(err.Error(), "GET /api/v1/topics/{topic}/jobs/{id}?group=<its group>&partition=<Kafka partition>&offset=<Kafka offset>, the last three optional")
	}
	w, err := con.pool.FindJob(r.Context(), l)
	if err != nil {
		return nil, con.redisErr(err)
	}
	return w.View(l), nil
}
