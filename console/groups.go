package console

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/groups"
	"github.com/sluicehq/sluice/internal/queue"
)

const (
	defaultGroupLimit = 100
	maxGroupLimit     = 1000
)

// groupList is the active lanes of every queue partition in fair order (a
// group's, or a shared lane of jobs without a group), up to limit per
// queue partition, and up to limit bulk groups a SCAN of the queue
// partitions' group hashes finds; of the topic the query names, else of
// every topic.
func (con *Console) groupList(r *http.Request, _ admin.Role) (any, error) {
	ctx := r.Context()
	limit := defaultGroupLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxGroupLimit {
			return nil, badRequest(fmt.Sprintf("limit %q: want 1..%d", s, maxGroupLimit), "")
		}
		limit = n
	}
	topics, err := con.topics(r, r.URL.Query().Get("topic"))
	if err != nil {
		return nil, err
	}
	now := con.cfg.Now()
	out := admin.GroupList{Active: []admin.ActiveLane{}, Bulk: []admin.GroupInfo{}}
	layout := con.pool.Keyspace()
	for _, topic := range topics {
		for part := range layout.Partitions {
			q := queue.Queue{Topic: topic, Part: part}
			k, c := layout.Keys(q), con.pool.Client(part)
			names, err := c.ZRange(ctx, k.Lanes(), 0, int64(limit-1)).Result()
			if err != nil {
				return nil, con.redisErr(err)
			}
			pipe := c.Pipeline()
			lens := make([]*redis.IntCmd, len(names))
			for i, n := range names {
				lens[i] = pipe.LLen(ctx, k.Lane(n))
			}
			if len(names) > 0 {
				if _, err := pipe.Exec(ctx); err != nil {
					return nil, con.redisErr(err)
				}
			}
			for i, n := range names {
				l, _ := queue.ParseLane(n)
				out.Active = append(out.Active, admin.ActiveLane{
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
			k := layout.Keys(q)
			prefix := k.Group("")
			// SCAN answers for one server: on a cluster, the master of
			// the queue partition's slot.
			c, err := con.pool.MasterOf(ctx, part, prefix)
			if err != nil {
				return nil, con.redisErr(err)
			}
			it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for len(out.Bulk) < limit && it.Next(ctx) {
				name := it.Val()[len(prefix):]
				st, err := con.pool.GroupStatus(ctx, topic, name)
				if err != nil {
					return nil, con.redisErr(err)
				}
				if st.Total > 0 { // a bulk group (implies st.Found)
					out.Bulk = append(out.Bulk, groups.View(name, q, st, now))
				}
			}
			if err := it.Err(); err != nil {
				return nil, con.redisErr(err)
			}
		}
	}
	return out, nil
}

// groupErr is internal/groups' answer as an admin API error: a 404 with
// hint, a 409 naming the topics, or Redis's 503.
func (con *Console) groupErr(err error, topic, name, hint string) error {
	var ambiguous *groups.AmbiguousError
	switch {
	case errors.Is(err, groups.ErrNotFound):
		where := "any topic's queues"
		if topic != "" {
			where = "topic " + topic + "'s queues"
		}
		return notFound(fmt.Sprintf("no group %q in %s in Redis", name, where), hint)
	case errors.As(err, &ambiguous):
		return &admin.Error{Status: http.StatusConflict,
			Message: fmt.Sprintf("group %q is in the queues of topics %s", name, strings.Join(ambiguous.Topics, ", ")),
			Fix:     "name one: ?topic=<topic> (sluice groups ... --topic <topic>)"}
	}
	return con.redisErr(err)
}

// groupGet is a group's status: internal/groups' Status, as the gate's
// GET /v1/topics/{topic}/groups/{id} answers it.
func (con *Console) groupGet(r *http.Request, _ admin.Role) (any, error) {
	name, topic := r.PathValue("group"), r.URL.Query().Get("topic")
	topics, err := con.topics(r, topic)
	if err != nil {
		return nil, err
	}
	st, err := groups.Read(r.Context(), con.pool, topics, name, con.cfg.Now())
	if err != nil {
		return nil, con.groupErr(err, topic, name, "its jobs may still be in Kafka (a group appears once the relay moved its first job), or it ended and expired")
	}
	return st, nil
}

// groupCancel cancels a group through internal/groups' one cancel path,
// the one the gate's DELETE takes too, and answers the status after it.
func (con *Console) groupCancel(r *http.Request, _ admin.Role) (any, error) {
	name, topic := r.PathValue("group"), r.URL.Query().Get("topic")
	topics, err := con.topics(r, topic)
	if err != nil {
		return nil, err
	}
	c, err := groups.Cancel(r.Context(), con.pool, topics, name, con.cfg.Now())
	if err != nil {
		// A typo must not leave a cancelled group behind, so a group Redis
		// does not know is not cancelled, here or at the gate.
		return nil, con.groupErr(err, topic, name, "a group is known (and can be cancelled) once the relay moved its first job to Redis, until it expires after it ended: if its jobs are still in Kafka, retry when one has arrived")
	}
	return c, nil
}
