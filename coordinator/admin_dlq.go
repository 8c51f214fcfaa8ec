package coordinator

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/queue"
)

// The dead letters of docs/admin.md: the Redis dead sets here, the
// relay's <topic>.dlq in admin_kafka.go.

const (
	defaultDLQLimit = 50
	maxDLQLimit     = 1000
)

func dlqLimit(r *http.Request) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return defaultDLQLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxDLQLimit {
		return 0, badRequest(fmt.Sprintf("limit %q: want 1..%d", s, maxDLQLimit), "")
	}
	return n, nil
}

func dlqSource(s string) (string, error) {
	switch s {
	case admin.SourceRedis, admin.SourceKafka:
		return s, nil
	case "":
		return "", badRequest("no source", "name source=redis (the dead set) or source=kafka (the relay's <topic>.dlq)")
	}
	return "", badRequest(fmt.Sprintf("source %q: want redis or kafka", s), "")
}

func (a *adminAPI) dlqList(r *http.Request, _ admin.Role) (any, error) {
	q := r.URL.Query()
	src, err := dlqSource(q.Get("source"))
	if err != nil {
		return nil, err
	}
	limit, err := dlqLimit(r)
	if err != nil {
		return nil, err
	}
	if src == admin.SourceKafka {
		return a.kafkaList(r.Context(), q.Get("topic"), limit, q.Get("cursor"))
	}
	return a.deadList(r, q.Get("topic"), limit, q.Get("cursor"))
}

// ParseDeadCursor reads a dead-set cursor, "<dead ms>:<job id>": the last
// entry of the page before.
func ParseDeadCursor(s string) (ms int64, id string, err error) {
	if s == "" {
		return -1, "", nil
	}
	m, id, ok := strings.Cut(s, ":")
	ms, perr := strconv.ParseInt(m, 10, 64)
	if !ok || perr != nil || ms < 0 || id == "" {
		return 0, "", badRequest(fmt.Sprintf("cursor %q: want the next_cursor of the page before", s), "")
	}
	return ms, id, nil
}

// deadEnvelope is what an entry shows of a dead job's envelope.
type deadEnvelope struct {
	ID    string `json:"id"`
	Topic string `json:"topic"`
	Type  string `json:"type"`
	Group string `json:"group"`
}

// decodeDead reads a dead job's record: its entry (queue.ParseEntry)
// holds the envelope.
func decodeDead(entry string) deadEnvelope {
	var e deadEnvelope
	if pe, err := queue.ParseEntry(entry); err == nil {
		entry = pe.Envelope
	}
	_ = json.Unmarshal([]byte(entry), &e) // a record that does not parse shows empty fields
	return e
}

func deadEntry(part int, ref queue.DeadRef) admin.DLQEntry {
	e := decodeDead(ref.Fields["env"])
	attempts, _ := strconv.Atoi(ref.Fields["attempts"])
	at := ref.At
	return admin.DLQEntry{
		ID: ref.ID, Partition: part, Topic: e.Topic, Group: e.Group, Type: e.Type,
		Attempts: attempts, LastError: ref.Fields["last_error"], DeadAt: &at,
	}
}

// deadList pages through every partition's dead set, newest first, with
// the topic filter applied after reading each job's envelope.
func (a *adminAPI) deadList(r *http.Request, topic string, limit int, cursor string) (any, error) {
	ms, id, err := ParseDeadCursor(cursor)
	if err != nil {
		return nil, err
	}
	type hit struct {
		part int
		ref  queue.DeadRef
	}
	var hits []hit
	for part := range a.c.cfg.Partitions {
		got, err := a.deadMatches(r, part, topic, ms, id, limit+1)
		if err != nil {
			return nil, err
		}
		for _, ref := range got {
			hits = append(hits, hit{part, ref})
		}
	}
	slices.SortFunc(hits, func(x, y hit) int {
		if c := cmp.Compare(y.ref.Score(), x.ref.Score()); c != 0 {
			return c
		}
		return strings.Compare(y.ref.ID, x.ref.ID)
	})
	out := admin.DLQList{Source: admin.SourceRedis, Topic: topic, Entries: []admin.DLQEntry{}}
	if len(hits) > limit {
		last := hits[limit-1].ref
		out.NextCursor = strconv.FormatInt(last.Score(), 10) + ":" + last.ID
		hits = hits[:limit]
	}
	for _, h := range hits {
		out.Entries = append(out.Entries, deadEntry(h.part, h.ref))
	}
	return out, nil
}

// deadMatches reads up to n entries of part's dead set after the cursor
// that belong to topic ("": any), with their fields.
func (a *adminAPI) deadMatches(r *http.Request, part int, topic string, ms int64, id string, n int) ([]queue.DeadRef, error) {
	ctx := r.Context()
	var out []queue.DeadRef
	page := min(max(n, 100), 1000)
	for len(out) < n {
		refs, err := a.c.pool.DeadPage(ctx, part, ms, id, page)
		if err != nil {
			return nil, a.redisErr(err)
		}
		if len(refs) == 0 {
			break
		}
		if err := a.c.pool.DeadJobs(ctx, part, refs); err != nil {
			return nil, a.redisErr(err)
		}
		for _, ref := range refs {
			if topic == "" || decodeDead(ref.Fields["env"]).Topic == topic {
				out = append(out, ref)
			}
		}
		last := refs[len(refs)-1]
		ms, id = last.Score(), last.ID
		if len(refs) < page {
			break
		}
	}
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}

func (a *adminAPI) dlqEntry(r *http.Request, _ admin.Role) (any, error) {
	q := r.URL.Query()
	src, err := dlqSource(q.Get("source"))
	if err != nil {
		return nil, err
	}
	id := q.Get("id")
	if id == "" {
		return nil, badRequest("no id", "name the entry's id, as the list shows it")
	}
	if src == admin.SourceKafka {
		return a.kafkaEntry(r.Context(), q.Get("topic"), id)
	}
	ref, part, ok, err := a.c.pool.FindDead(r.Context(), id)
	if err != nil {
		return nil, a.redisErr(err)
	}
	if !ok {
		return nil, notFound(fmt.Sprintf("no dead job %q in any partition's dead set", id), "it may have been replayed, purged, or capped out (the worker's --dead-max)")
	}
	refs := []queue.DeadRef{ref}
	if err := a.c.pool.DeadJobs(r.Context(), part, refs); err != nil {
		return nil, a.redisErr(err)
	}
	e := deadEntry(part, refs[0])
	env := refs[0].Fields["env"]
	if pe, err := queue.ParseEntry(env); err == nil {
		env = pe.Envelope
	}
	if json.Valid([]byte(env)) {
		e.Envelope = json.RawMessage(env)
	}
	return e, nil
}

func (a *adminAPI) dlqReplay(r *http.Request, _ admin.Role) (any, error) {
	return a.dlqAct(r, true)
}

func (a *adminAPI) dlqPurge(r *http.Request, _ admin.Role) (any, error) {
	return a.dlqAct(r, false)
}

// maxDLQIDs bounds the ids one request names.
const maxDLQIDs = 10000

func (a *adminAPI) dlqAct(r *http.Request, replay bool) (any, error) {
	var act admin.DLQAction
	if err := decodeBody(r, &act); err != nil {
		return nil, err
	}
	if _, err := dlqSource(act.Source); err != nil {
		return nil, err
	}
	switch {
	case act.All && len(act.IDs) > 0:
		return nil, badRequest("name ids or all, not both", "")
	case !act.All && len(act.IDs) == 0:
		return nil, badRequest("nothing named", "give ids, or all: true")
	case len(act.IDs) > maxDLQIDs:
		return nil, badRequest(fmt.Sprintf("%d ids: at most %d per request", len(act.IDs), maxDLQIDs), "")
	}
	var res admin.DLQResult
	var err error
	if act.Source == admin.SourceKafka {
		res, err = a.kafkaAct(r.Context(), act, replay)
	} else {
		res, err = a.deadAct(r, act, replay)
	}
	if err != nil {
		return nil, err
	}
	if res.Missing > 0 {
		// The rest was done: the answer says so, with a status that a
		// script notices.
		b, _ := json.Marshal(res)
		return nil, &admin.Error{Status: http.StatusConflict, Message: fmt.Sprintf("%d of the named entries were not there; the others were done: %s", res.Missing, b),
			Fix: "list them again (sluice dlq ls): they may have been replayed or purged already"}
	}
	return res, nil
}

// deadAct replays or purges dead jobs, one script call each.
func (a *adminAPI) deadAct(r *http.Request, act admin.DLQAction, replay bool) (admin.DLQResult, error) {
	ctx := r.Context()
	type target struct {
		part int
		ref  queue.DeadRef
	}
	var targets []target
	missing := 0
	if act.All {
		for part := range a.c.cfg.Partitions {
			refs, err := a.deadMatches(r, part, act.Topic, -1, "", 1<<30)
			if err != nil {
				return admin.DLQResult{}, err
			}
			for _, ref := range refs {
				targets = append(targets, target{part, ref})
			}
		}
	} else {
		for _, id := range act.IDs {
			ref, part, ok, err := a.c.pool.FindDead(ctx, id)
			if err != nil {
				return admin.DLQResult{}, a.redisErr(err)
			}
			if !ok {
				missing++
				continue
			}
			if replay { // a purge needs only the id; a replay, the envelope
				refs := []queue.DeadRef{ref}
				if err := a.c.pool.DeadJobs(ctx, part, refs); err != nil {
					return admin.DLQResult{}, a.redisErr(err)
				}
				ref = refs[0]
			}
			targets = append(targets, target{part, ref})
		}
	}
	res := admin.DLQResult{}
	done := 0
	now := a.c.cfg.Now()
	for _, t := range targets {
		if !replay {
			ok, err := a.c.pool.PurgeDead(ctx, t.part, t.ref.ID)
			if err != nil {
				return res, a.redisErr(err)
			}
			if ok {
				done++
			} else {
				missing++
			}
			continue
		}
		e := decodeDead(t.ref.Fields["env"])
		out, err := a.c.pool.ReplayDead(ctx, t.part, t.ref.ID, now)
		if err != nil {
			return res, a.redisErr(err)
		}
		switch out {
		case queue.ReplayDone:
			done++
		case queue.ReplayCancelled:
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s: its group %s was cancelled", t.ref.ID, e.Group))
		case queue.ReplayExpired:
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s: its record had expired (the worker's --dead-ttl); taken off the dead set", t.ref.ID))
		default:
			missing++
		}
	}
	if replay {
		res.Replayed = &done
	} else {
		res.Purged = &done
	}
	res.Missing = missing
	a.log.Info("dead set changed", "replay", replay, "done", done, "missing", missing, "skipped", len(res.Skipped), "topic", act.Topic, "all", act.All)
	return res, nil
}
