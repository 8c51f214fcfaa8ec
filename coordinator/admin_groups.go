package coordinator

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/queue"
)

const (
	defaultGroupLimit = 100
	maxGroupLimit     = 1000
)

func groupInfo(name string, q queue.Queue, st queue.GroupStatus) admin.GroupInfo {
	g := admin.GroupInfo{
		Group: name, Partition: q.Part, Topic: q.Topic, Total: st.Total, Relayed: st.Relayed, Queued: st.Queued,
		Running: st.Running, Done: st.Done, Failed: st.Failed, Dead: st.Dead, Cancelled: st.Cancelled,
		FirstAt: admin.TimePtr(st.FirstAt), ClosedAt: admin.TimePtr(st.ClosedAt), CancelledAt: admin.TimePtr(st.CancelledAt),
		CompletedAt: admin.TimePtr(st.CompletedAt), CallbackURL: st.CallbackURL, CallbackState: st.CallbackState,
		CallbackAttempts: st.CallbackAttempts, CallbackError: st.CallbackError,
	}
	if p, ok := st.Progress(); ok {
		g.Progress = &p
	}
	return g
}

// groupList is the active lanes of every queue partition in fair order (a
// group's, or a shared lane of jobs without a group), up to limit per
// queue partition, and up to limit bulk groups a SCAN of the queue
// partitions' group hashes finds; of the topic the query names, else of
// every topic.
func (a *adminAPI) groupList(r *http.Request, _ admin.Role) (any, error) {
	ctx := r.Context()
	limit := defaultGroupLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxGroupLimit {
			return nil, badRequest(fmt.Sprintf("limit %q: want 1..%d", s, maxGroupLimit), "")
		}
		limit = n
	}
	topics, err := a.topics(r, r.URL.Query().Get("topic"))
	if err != nil {
		return nil, err
	}
	out := GroupList{Active: []ActiveLane{}, Bulk: []admin.GroupInfo{}}
	layout := a.c.pool.Layout()
	for _, topic := range topics {
		for part := range layout.Partitions {
			q := queue.Queue{Topic: topic, Part: part}
			k, c := layout.Keys(q), a.c.pool.Client(part)
			names, err := c.ZRange(ctx, k.Lanes(), 0, int64(limit-1)).Result()
			if err != nil {
				return nil, a.redisErr(err)
			}
			pipe := c.Pipeline()
			lens := make([]*redis.IntCmd, len(names))
			for i, n := range names {
				lens[i] = pipe.LLen(ctx, k.Lane(n))
			}
			if len(names) > 0 {
				if _, err := pipe.Exec(ctx); err != nil {
					return nil, a.redisErr(err)
				}
			}
			for i, n := range names {
				l, _ := queue.ParseLane(n)
				out.Active = append(out.Active, ActiveLane{
					ActiveGroup: admin.ActiveGroup{Partition: part, Lane: n, Group: l.Group, Ready: lens[i].Val()}, Topic: topic,
				})
			}
		}
	}
	// Bulk groups: no index holds them, so each queue partition's group
	// hashes are scanned (O(keys) for Redis, in steps) until limit are
	// found.
	for _, topic := range topics {
		for part := range layout.Partitions {
			if len(out.Bulk) >= limit {
				return out, nil
			}
			q := queue.Queue{Topic: topic, Part: part}
			k, c := layout.Keys(q), a.c.pool.Client(part)
			prefix := k.Group("")
			it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for len(out.Bulk) < limit && it.Next(ctx) {
				name := it.Val()[len(prefix):]
				st, err := a.c.pool.GroupStatus(ctx, topic, name)
				if err != nil {
					return nil, a.redisErr(err)
				}
				if st.Total > 0 { // a bulk group (implies st.Found)
					out.Bulk = append(out.Bulk, groupInfo(name, q, st))
				}
			}
			if err := it.Err(); err != nil {
				return nil, a.redisErr(err)
			}
		}
	}
	return out, nil
}

// findGroup reads group name's status in topic's queues, or, without a
// topic, in every topic's: a 404, with hint, when none has it, a 409
// naming the topics when more than one has.
func (a *adminAPI) findGroup(r *http.Request, topic, name, hint string) (queue.Queue, queue.GroupStatus, error) {
	topics, err := a.topics(r, topic)
	if err != nil {
		return queue.Queue{}, queue.GroupStatus{}, err
	}
	layout := a.c.pool.Layout()
	var found []string
	var q queue.Queue
	var st queue.GroupStatus
	for _, t := range topics {
		s, err := a.c.pool.GroupStatus(r.Context(), t, name)
		if err != nil {
			return q, st, a.redisErr(err)
		}
		if s.Found {
			found = append(found, t)
			q, st = layout.QueueOf(t, name, ""), s
		}
	}
	switch len(found) {
	case 0:
		where := "any topic's queues"
		if topic != "" {
			where = "topic " + topic + "'s queues"
		}
		return q, st, notFound(fmt.Sprintf("no group %q in %s in Redis", name, where), hint)
	case 1:
		return q, st, nil
	}
	return q, st, &admin.Error{Status: http.StatusConflict,
		Message: fmt.Sprintf("group %q is in the queues of topics %s", name, strings.Join(found, ", ")),
		Fix:     "name one: ?topic=<topic> (sluice groups ... --topic <topic>)"}
}

func (a *adminAPI) groupGet(r *http.Request, _ admin.Role) (any, error) {
	name := r.PathValue("group")
	q, st, err := a.findGroup(r, r.URL.Query().Get("topic"), name, "its jobs may still be in Kafka, or it ended and expired")
	if err != nil {
		return nil, err
	}
	return groupInfo(name, q, st), nil
}

func (a *adminAPI) groupCancel(r *http.Request, _ admin.Role) (any, error) {
	name := r.PathValue("group")
	// A typo must not leave a cancelled group behind; the gate's
	// DELETE /v1/groups/{id} cancels one still on its way.
	q, _, err := a.findGroup(r, r.URL.Query().Get("topic"), name,
		"if its jobs are still in Kafka, cancel it at the gate: DELETE /v1/groups/{id}")
	if err != nil {
		return nil, err
	}
	n, err := a.c.pool.CancelGroup(r.Context(), q.Topic, name, a.c.cfg.Now())
	if err != nil {
		return nil, a.redisErr(err)
	}
	return admin.CancelResult{Group: name, Removed: n}, nil
}
