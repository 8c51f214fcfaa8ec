package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/queue"
)

const (
	defaultGroupLimit = 100
	maxGroupLimit     = 1000
)

func groupInfo(name string, part int, st queue.GroupStatus) admin.GroupInfo {
	g := admin.GroupInfo{
		Group: name, Partition: part, Topic: st.Topic, Total: st.Total, Relayed: st.Relayed, Queued: st.Queued,
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

// groupList is the active lanes of every partition in fair order (a
// group's, or a shared lane of jobs without a group), and the bulk groups
// a SCAN of the partitions' group hashes finds.
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
	out := admin.GroupList{Active: []admin.ActiveGroup{}, Bulk: []admin.GroupInfo{}}
	layout := a.c.pool.Layout()
	for part := range layout.Partitions {
		k, c := layout.Keys(part), a.c.pool.Client(part)
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
			out.Active = append(out.Active, admin.ActiveGroup{Partition: part, Lane: n, Group: l.Group, Ready: lens[i].Val()})
		}
	}
	// Bulk groups: no index holds them, so each partition's group hashes
	// are scanned (O(keys) for Redis, in steps) until limit are found.
	for part := range layout.Partitions {
		if len(out.Bulk) >= limit {
			break
		}
		k, c := layout.Keys(part), a.c.pool.Client(part)
		prefix := k.Group("")
		it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for len(out.Bulk) < limit && it.Next(ctx) {
			name := it.Val()[len(prefix):]
			st, err := a.c.pool.GroupStatus(ctx, name)
			if err != nil {
				return nil, a.redisErr(err)
			}
			if st.Total > 0 { // a bulk group (implies st.Found)
				out.Bulk = append(out.Bulk, groupInfo(name, part, st))
			}
		}
		if err := it.Err(); err != nil {
			return nil, a.redisErr(err)
		}
	}
	return out, nil
}

// groupStatus reads group name's status; a not-found error, with hint,
// when Redis has no hash for it.
func (a *adminAPI) groupStatus(ctx context.Context, name, hint string) (queue.GroupStatus, error) {
	st, err := a.c.pool.GroupStatus(ctx, name)
	if err != nil {
		return st, a.redisErr(err)
	}
	if !st.Found {
		return st, notFound(fmt.Sprintf("no group %q in Redis", name), hint)
	}
	return st, nil
}

func (a *adminAPI) groupGet(r *http.Request, _ admin.Role) (any, error) {
	name := r.PathValue("group")
	st, err := a.groupStatus(r.Context(), name, "its jobs may still be in Kafka, or it ended and expired")
	if err != nil {
		return nil, err
	}
	return groupInfo(name, a.c.pool.Layout().PartitionOf(name), st), nil
}

func (a *adminAPI) groupCancel(r *http.Request, _ admin.Role) (any, error) {
	name := r.PathValue("group")
	// A typo must not leave a cancelled group behind; the gate's
	// DELETE /v1/groups/{id} cancels one still on its way.
	if _, err := a.groupStatus(r.Context(), name,
		"if its jobs are still in Kafka, cancel it at the gate: DELETE /v1/groups/{id}"); err != nil {
		return nil, err
	}
	n, err := a.c.pool.CancelGroup(r.Context(), name, a.c.cfg.Now())
	if err != nil {
		return nil, a.redisErr(err)
	}
	return admin.CancelResult{Group: name, Removed: n}, nil
}
