package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ListStates are the states a job listing reads, in the order a listing
// of every state pages through them. "retained" is the jobs that ended
// and whose record is kept: done (retain, or an earlier failed attempt)
// and cancelled.
var ListStates = []string{WhereRunning, WhereReady, WhereDelayed, WhereDead, "retained"}

// JobPage is the admin API's GET /api/v1/jobs answer: a page of a topic's
// jobs, across its partitions (or one), in one state or all of them.
// NextCursor, when not empty, asks for the next page; an empty one says
// the listing is done.
type JobPage struct {
	Topic      string       `json:"topic"`
	State      string       `json:"state,omitempty"`
	Jobs       []JobListing `json:"jobs"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

// JobQuery says what ListJobPage lists: Topic's jobs in States (in order),
// on Parts (in order), Limit at most, from Cursor (a NextCursor; "" for
// the first page).
type JobQuery struct {
	Topic  string
	States []string
	Parts  []int
	Limit  int
	Cursor string
}

// listCursor is where a listing goes on: the state and partition (their
// indexes in the query) and the position within them (an offset, or a
// SCAN cursor for retained records). It travels as "s.p.pos".
type listCursor struct {
	state, part int
	pos         uint64
}

func (c listCursor) String() string {
	return strconv.Itoa(c.state) + "." + strconv.Itoa(c.part) + "." + strconv.FormatUint(c.pos, 10)
}

func parseListCursor(s string) (listCursor, error) {
	f := strings.Split(s, ".")
	if len(f) != 3 {
		return listCursor{}, fmt.Errorf("cursor %q: want the next_cursor of the page before", s)
	}
	st, err1 := strconv.Atoi(f[0])
	p, err2 := strconv.Atoi(f[1])
	pos, err3 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || st < 0 || p < 0 {
		return listCursor{}, fmt.Errorf("cursor %q: want the next_cursor of the page before", s)
	}
	return listCursor{st, p, pos}, nil
}

// ErrBadCursor wraps a cursor ListJobPage cannot read (a 400).
var ErrBadCursor = errors.New("bad cursor")

// ListJobPage lists a page of jobs (see JobQuery). Each state is read in
// its own order: running by lease deadline, ready in the fair order of
// lanes then each lane's order, delayed by due time, dead newest first,
// retained in the order Redis's SCAN gives (keys of records; a record may
// show twice if Redis rehashes between pages). What it reads may move
// between pages: a listing is a look, not a snapshot.
func (p *Pool) ListJobPage(ctx context.Context, jq JobQuery) (JobPage, error) {
	page := JobPage{Topic: jq.Topic, Jobs: []JobListing{}}
	if len(jq.States) == 1 {
		page.State = jq.States[0]
	}
	cur := listCursor{}
	if jq.Cursor != "" {
		var err error
		if cur, err = parseListCursor(jq.Cursor); err != nil || cur.state >= len(jq.States) || cur.part >= len(jq.Parts) {
			if err == nil {
				err = fmt.Errorf("cursor %q: not of this listing (its topic, state and partition filters must stay the same)", jq.Cursor)
			}
			return page, fmt.Errorf("%w: %w", ErrBadCursor, err)
		}
	}
	for ; cur.state < len(jq.States); cur.state, cur.part, cur.pos = cur.state+1, 0, 0 {
		for ; cur.part < len(jq.Parts); cur.part, cur.pos = cur.part+1, 0 {
			q := Queue{Topic: jq.Topic, Part: jq.Parts[cur.part]}
			want := jq.Limit - len(page.Jobs)
			got, next, more, err := p.listState(ctx, q, jq.States[cur.state], cur.pos, want)
			if err != nil {
				return page, err
			}
			page.Jobs = append(page.Jobs, got...)
			if len(page.Jobs) >= jq.Limit {
				if more {
					page.NextCursor = listCursor{cur.state, cur.part, next}.String()
				} else if n := (listCursor{cur.state, cur.part + 1, 0}); n.part < len(jq.Parts) {
					page.NextCursor = n.String()
				} else if cur.state+1 < len(jq.States) {
					page.NextCursor = listCursor{cur.state + 1, 0, 0}.String()
				}
				return page, nil
			}
		}
	}
	return page, nil
}

// listState reads up to n jobs of q in state from pos on; next is the
// position after them, more whether any may follow.
func (p *Pool) listState(ctx context.Context, q Queue, state string, pos uint64, n int) (out []JobListing, next uint64, more bool, err error) {
	k, c := p.keyspace.Keys(q), p.byPart[q.Part]
	switch state {
	case WhereRunning:
		skip := int(pos)
		err = p.eachRunning(ctx, q, skip+n+1, func(batch string, deadline time.Time, pe ParsedEntry, _ int, _ string) bool {
			if skip > 0 {
				skip--
				return true
			}
			if len(out) == n {
				more = true
				return false
			}
			out = append(out, JobListing{ID: pe.ID, Lane: pe.Lane, State: WhereRunning, Attempts: pe.Attempts + 1, Partition: q.Part,
				Worker: batchOwner(batch), Since: batchClaimed(batch), Batch: batch, Until: deadline})
			return true
		})
		return out, pos + uint64(len(out)), more, err
	case WhereReady:
		return p.listReady(ctx, q, pos, n)
	case WhereDelayed:
		entries, err := c.ZRangeWithScores(ctx, k.Delayed(), int64(pos), int64(pos)+int64(n)).Result()
		if err != nil {
			return nil, pos, false, fmt.Errorf("delayed of %s: %w", q, err)
		}
		more = len(entries) > n
		entries = entries[:min(n, len(entries))]
		parsed := make([]ParsedEntry, len(entries))
		states := make([]*redis.StringCmd, len(entries))
		pipe := c.Pipeline()
		for i, z := range entries {
			e, _ := z.Member.(string)
			if parsed[i], err = ParseEntry(e); err == nil && parsed[i].Attempts > 0 {
				states[i] = pipe.HGet(ctx, k.Job(parsed[i].ID), "state")
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, pos, false, fmt.Errorf("records of %s: %w", q, err)
		}
		for i, z := range entries {
			state := ""
			if states[i] != nil {
				state = states[i].Val()
			}
			out = append(out, JobListing{ID: parsed[i].ID, Lane: parsed[i].Lane, State: WhereDelayed, Attempts: parsed[i].Attempts, Partition: q.Part,
				Until: time.UnixMilli(int64(z.Score)), Why: delayReason(parsed[i], state, int64(z.Score))})
		}
		return out, pos + uint64(len(entries)), more, nil
	case WhereDead:
		ids, err := c.ZRevRangeWithScores(ctx, k.Dead(), int64(pos), int64(pos)+int64(n)).Result()
		if err != nil {
			return nil, pos, false, fmt.Errorf("dead of %s: %w", q, err)
		}
		more = len(ids) > n
		ids = ids[:min(n, len(ids))]
		recs := make([]*redis.SliceCmd, len(ids))
		pipe := c.Pipeline()
		for i, z := range ids {
			id, _ := z.Member.(string)
			recs[i] = pipe.HMGet(ctx, k.Job(id), "attempts", "last_error")
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, pos, false, fmt.Errorf("dead records of %s: %w", q, err)
		}
		for i, z := range ids {
			id, _ := z.Member.(string)
			f := recs[i].Val()
			l := JobListing{ID: id, State: WhereDead, Partition: q.Part, Until: time.UnixMilli(int64(z.Score))}
			if len(f) == 2 {
				a, _ := f[0].(string)
				l.Attempts, _ = strconv.Atoi(a)
				l.LastError, _ = f[1].(string)
			}
			out = append(out, l)
		}
		return out, pos + uint64(len(ids)), more, nil
	case "retained":
		return p.listRetained(ctx, q, pos, n)
	}
	return nil, pos, false, fmt.Errorf("state %q: want one of %s", state, strings.Join(ListStates, ", "))
}

// listReady reads the ready entries of q's lanes in the fair order, from
// the pos-th on (lanes' lengths are read first, so that a page deep in
// the listing skips whole lanes without reading them).
func (p *Pool) listReady(ctx context.Context, q Queue, pos uint64, n int) (out []JobListing, next uint64, more bool, err error) {
	k, c := p.keyspace.Keys(q), p.byPart[q.Part]
	lanes, err := c.ZRange(ctx, k.Lanes(), 0, -1).Result()
	if err != nil {
		return nil, pos, false, fmt.Errorf("lanes of %s: %w", q, err)
	}
	pipe := c.Pipeline()
	lens := make([]*redis.IntCmd, len(lanes))
	for i, l := range lanes {
		lens[i] = pipe.LLen(ctx, k.Lane(l))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, pos, false, fmt.Errorf("lanes of %s: %w", q, err)
	}
	skip := int64(pos)
	for i, l := range lanes {
		size := lens[i].Val()
		if skip >= size {
			skip -= size
			continue
		}
		if len(out) == n {
			return out, pos + uint64(len(out)), true, nil
		}
		entries, err := c.LRange(ctx, k.Lane(l), skip, skip+int64(n-len(out))-1).Result()
		if err != nil {
			return nil, pos, false, fmt.Errorf("lane %s of %s: %w", l, q, err)
		}
		for _, e := range entries {
			if pe, err := ParseEntry(e); err == nil {
				out = append(out, JobListing{ID: pe.ID, Lane: pe.Lane, State: WhereReady, Attempts: pe.Attempts, Partition: q.Part, Why: l})
			}
		}
		more = more || skip+int64(len(entries)) < size
		skip = 0
		if len(out) >= n {
			more = more || i+1 < len(lanes)
			return out, pos + uint64(len(out)), more, nil
		}
	}
	return out, pos + uint64(len(out)), false, nil
}

// listRetained reads records of jobs that ended and are kept (done,
// cancelled) by SCAN over q's job records: pos is the SCAN cursor.
func (p *Pool) listRetained(ctx context.Context, q Queue, pos uint64, n int) (out []JobListing, next uint64, more bool, err error) {
	k, c := p.keyspace.Keys(q), p.byPart[q.Part]
	prefix := k.Job("")
	cursor := pos
	for rounds := 0; len(out) < n && rounds < 100; rounds++ {
		keys, nextCursor, err := c.Scan(ctx, cursor, globEscape(prefix)+"*", int64(max(n, 100))).Result()
		if err != nil {
			return nil, pos, false, fmt.Errorf("records of %s: %w", q, err)
		}
		pipe := c.Pipeline()
		recs := make([]*redis.SliceCmd, len(keys))
		for i, key := range keys {
			recs[i] = pipe.HMGet(ctx, key, "state", "attempts", "done_ms", "cancelled_ms", "result")
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, pos, false, fmt.Errorf("records of %s: %w", q, err)
		}
		// A SCAN round answers whole: the page may run over n by a
		// round's keys, never cut one in two (the cursor cannot say so).
		for i, key := range keys {
			f := recs[i].Val()
			state, _ := f[0].(string)
			if !slices.Contains([]string{WhereDone, WhereCancelled}, state) {
				continue
			}
			a, _ := f[1].(string)
			at, _ := f[2].(string)
			if state == WhereCancelled {
				at, _ = f[3].(string)
			}
			l := JobListing{ID: strings.TrimPrefix(key, prefix), State: state, Partition: q.Part, Until: msTime(at)}
			l.Attempts, _ = strconv.Atoi(a)
			out = append(out, l)
		}
		cursor = nextCursor
		if cursor == 0 {
			return out, 0, false, nil
		}
	}
	return out, cursor, true, nil
}
