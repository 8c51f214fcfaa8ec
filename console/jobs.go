package console

import (
	"fmt"
	"net/http"
	"strconv"

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

// jobList answers GET /api/v1/jobs?topic=T&partition=P[&limit=N]: a queue
// partition's running jobs and delayed jobs with why they wait.
func (con *Console) jobList(r *http.Request, _ admin.Role) (any, error) {
	q := r.URL.Query()
	topic := q.Get("topic")
	if err := queue.ValidTopic(topic); err != nil {
		return nil, badRequest("topic: "+err.Error(), "GET /api/v1/jobs?topic=<topic>&partition=<Redis partition>[&limit=N]")
	}
	part, err := strconv.Atoi(q.Get("partition"))
	if err != nil || part < 0 || part >= con.cfg.Partitions {
		return nil, badRequest(fmt.Sprintf("partition %q: want 0..%d", q.Get("partition"), con.cfg.Partitions-1), "")
	}
	limit := 100
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > 1000 {
			return nil, badRequest(fmt.Sprintf("limit %q: want 1..1000", s), "")
		}
	}
	qu := queue.Queue{Topic: topic, Part: part}
	running, delayed, err := con.pool.ListJobs(r.Context(), qu, limit)
	if err != nil {
		return nil, con.redisErr(err)
	}
	return queue.JobList{Topic: topic, Partition: part, Running: running, Delayed: delayed}, nil
}
