package console

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

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

// jobList answers GET /api/v1/jobs?topic=T[&state=S][&partition=P]
// [&limit=N][&cursor=C]: a page of a topic's jobs, across its partitions
// (or partition P), in one state (running, ready, delayed, dead,
// retained) or all of them, as queue.ListJobPage reads them.
func (con *Console) jobList(r *http.Request, _ admin.Role) (any, error) {
	q := r.URL.Query()
	const usage = "GET /api/v1/jobs?topic=<topic>[&state=running|ready|delayed|dead|retained][&partition=<Redis partition>][&limit=1..1000][&cursor=<next_cursor>]"
	topic := q.Get("topic")
	if err := queue.ValidTopic(topic); err != nil {
		return nil, badRequest("topic: "+err.Error(), usage)
	}
	jq := queue.JobQuery{Topic: topic, States: queue.ListStates, Limit: 100, Cursor: q.Get("cursor")}
	if s := q.Get("state"); s != "" && s != "all" {
		if !slices.Contains(queue.ListStates, s) {
			return nil, badRequest(fmt.Sprintf("state %q: want one of %s, or all", s, strings.Join(queue.ListStates, ", ")), usage)
		}
		jq.States = []string{s}
	}
	if s := q.Get("partition"); s != "" {
		part, err := strconv.Atoi(s)
		if err != nil || part < 0 || part >= con.cfg.Partitions {
			return nil, badRequest(fmt.Sprintf("partition %q: want 0..%d", s, con.cfg.Partitions-1), usage)
		}
		jq.Parts = []int{part}
	} else {
		for p := range con.cfg.Partitions {
			jq.Parts = append(jq.Parts, p)
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return nil, badRequest(fmt.Sprintf("limit %q: want 1..1000", s), usage)
		}
		jq.Limit = n
	}
	page, err := con.pool.ListJobPage(r.Context(), jq)
	if errors.Is(err, queue.ErrBadCursor) {
		return nil, badRequest(err.Error(), "give the next_cursor of the page before, with the same topic, state and partition")
	}
	if err != nil {
		return nil, con.redisErr(err)
	}
	return page, nil
}

// jobCancel answers POST /api/v1/topics/{topic}/jobs/{id}/cancel and
// jobDelete DELETE /api/v1/topics/{topic}/jobs/{id} (docs/admin.md): one
// job's cancel or delete, as queue.CancelJob does them; 404 when Redis
// does not hold the job, 409 when its state does not allow it.
func (con *Console) jobCancel(r *http.Request, _ admin.Role) (any, error) {
	return con.jobChange(r, false)
}

func (con *Console) jobDelete(r *http.Request, _ admin.Role) (any, error) {
	return con.jobChange(r, true)
}

func (con *Console) jobChange(r *http.Request, del bool) (any, error) {
	l, err := queue.ParseJobLookup(r.PathValue("topic"), r.PathValue("id"), r.URL.Query().Get("group"), "", "")
	if err != nil {
		return nil, badRequest(err.Error(), "name the job by its topic and id, and its group if it has one (?group=G): the group places it")
	}
	outcome, w, err := con.pool.CancelJob(r.Context(), l, del, con.cfg.Now())
	var se *queue.JobStateError
	switch {
	case errors.As(err, &se):
		return nil, &admin.Error{Status: http.StatusConflict, Message: se.Message, Fix: se.Fix}
	case errors.Is(err, queue.ErrJobNotFound):
		return nil, notFound(fmt.Sprintf("job %s of topic %s: Redis does not hold it (where its group places it: partition %d)", l.ID, l.Topic, w.Queue.Part),
			"give its group (?group=G) if it has one; a job done without a record, or still in Kafka, cannot be cancelled here")
	case err != nil:
		return nil, con.redisErr(err)
	}
	return w.Change(l, outcome), nil
}
