package console

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/job"
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

func (con *Console) dlqList(r *http.Request, _ admin.Role) (any, error) {
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
		return con.kafkaList(r.Context(), q.Get("topic"), limit, q.Get("cursor"))
	}
	return con.deadList(r, q.Get("topic"), limit, q.Get("cursor"))
}

// deadCursor is where a page of the dead sets ends: the last entry it
// showed. The dead sets are listed newest first, then by id and topic
// descending, so that a page may end anywhere among entries that died in
// the same millisecond.
type deadCursor struct {
	MS        int64 // when it died, Unix ms; -1: before the first page
	Topic, ID string
}

// String is the cursor as next_cursor shows it, "<dead ms>:<topic>:<job id>".
func (c deadCursor) String() string {
	return strconv.FormatInt(c.MS, 10) + ":" + c.Topic + ":" + c.ID
}

// after reports whether the entry (ms, topic, id) comes after the cursor.
func (c deadCursor) after(ms int64, topic, id string) bool {
	if c.MS < 0 || ms != c.MS {
		return c.MS < 0 || ms < c.MS
	}
	if id != c.ID {
		return id < c.ID
	}
	return topic < c.Topic
}

// from is where queue partition q's page starts (queue.Pool.DeadPage's
// cursor): strictly after the cursor's id, or at it for a topic that comes
// after the cursor's among entries of the same time and id.
func (c deadCursor) from(topic string) (int64, string) {
	if c.MS >= 0 && topic < c.Topic {
		return c.MS, c.ID + "\x00" // ids below it: the cursor's id too
	}
	return c.MS, c.ID
}

// parseDeadCursor reads a dead-set cursor, "<dead ms>:<topic>:<job id>":
// the next_cursor of the page before. "" is the first page.
func parseDeadCursor(s string) (deadCursor, error) {
	if s == "" {
		return deadCursor{MS: -1}, nil
	}
	bad := badRequest(fmt.Sprintf("cursor %q: want the next_cursor of the page before", s), "")
	m, rest, ok := strings.Cut(s, ":")
	topic, id, ok2 := strings.Cut(rest, ":")
	ms, err := strconv.ParseInt(m, 10, 64)
	if !ok || !ok2 || err != nil || ms < 0 || id == "" || queue.ValidTopic(topic) != nil {
		return deadCursor{}, bad
	}
	return deadCursor{MS: ms, Topic: topic, ID: id}, nil
}

// decodeDead reads the envelope (internal/job) of a dead job's record: its
// entry (queue.ParseEntry) holds it. Leniently: a list must show what it
// can of a record that an older or newer envelope wrote, so a field that
// does not parse shows empty, where the workers' strict decoder
// (job.Decode) would refuse the whole envelope.
func decodeDead(entry string) job.Job {
	var e job.Job
	if pe, err := queue.ParseEntry(entry); err == nil {
		entry = pe.Envelope
	}
	_ = json.Unmarshal([]byte(entry), &e) // a record that does not parse shows empty fields
	return e
}

func deadEntry(q queue.Queue, ref queue.DeadRef) admin.DLQEntry {
	e := decodeDead(ref.Fields["env"])
	attempts, _ := strconv.Atoi(ref.Fields["attempts"])
	at := ref.At
	return admin.DLQEntry{
		ID: ref.ID, Partition: q.Part, Topic: q.Topic, Group: e.Group, Type: e.Type,
		Attempts: attempts, LastError: ref.Fields["last_error"], DeadAt: &at,
	}
}

// deadHit is a dead job and its queue partition.
type deadHit struct {
	q   queue.Queue
	ref queue.DeadRef
}

// deadList pages through the dead sets of topic's queue partitions ("":
// every topic's), newest first.
func (con *Console) deadList(r *http.Request, topic string, limit int, cursor string) (any, error) {
	cur, err := parseDeadCursor(cursor)
	if err != nil {
		return nil, err
	}
	topics, err := con.topics(r, topic)
	if err != nil {
		return nil, err
	}
	var hits []deadHit
	for _, t := range topics {
		for part := range con.cfg.Partitions {
			q := queue.Queue{Topic: t, Part: part}
			ms, id := cur.from(t)
			got, err := con.deadPage(r, q, ms, id, limit+1)
			if err != nil {
				return nil, err
			}
			for _, ref := range got {
				if cur.after(ref.Score(), t, ref.ID) {
					hits = append(hits, deadHit{q, ref})
				}
			}
		}
	}
	slices.SortFunc(hits, func(x, y deadHit) int {
		if c := cmp.Compare(y.ref.Score(), x.ref.Score()); c != 0 {
			return c
		}
		if c := strings.Compare(y.ref.ID, x.ref.ID); c != 0 {
			return c
		}
		return strings.Compare(y.q.Topic, x.q.Topic)
	})
	out := admin.DLQList{Source: admin.SourceRedis, Topic: topic, Entries: []admin.DLQEntry{}}
	if len(hits) > limit {
		last := hits[limit-1]
		out.NextCursor = deadCursor{MS: last.ref.Score(), Topic: last.q.Topic, ID: last.ref.ID}.String()
		hits = hits[:limit]
	}
	for _, h := range hits {
		out.Entries = append(out.Entries, deadEntry(h.q, h.ref))
	}
	return out, nil
}

// deadPage reads up to n entries of q's dead set after (ms, id) (ms < 0:
// from the newest), with their fields.
func (con *Console) deadPage(r *http.Request, q queue.Queue, ms int64, id string, n int) ([]queue.DeadRef, error) {
	ctx := r.Context()
	var out []queue.DeadRef
	page := min(max(n, 100), 1000)
	for len(out) < n {
		refs, err := con.pool.DeadPage(ctx, q, ms, id, min(page, n-len(out)))
		if err != nil {
			return nil, con.redisErr(err)
		}
		if len(refs) == 0 {
			break
		}
		if err := con.pool.DeadJobs(ctx, q, refs); err != nil {
			return nil, con.redisErr(err)
		}
		out = append(out, refs...)
		last := refs[len(refs)-1]
		ms, id = last.Score(), last.ID
	}
	return out, nil
}

// findDead finds dead job id in topic's dead sets, or, without a topic, in
// every topic's: more than one topic's holds it is a 409 naming them.
// ok is false when none does.
func (con *Console) findDead(r *http.Request, topic, id string) (deadHit, bool, error) {
	topics, err := con.topics(r, topic)
	if err != nil {
		return deadHit{}, false, err
	}
	var found []deadHit
	for _, t := range topics {
		ref, q, ok, err := con.pool.FindDead(r.Context(), t, id)
		if err != nil {
			return deadHit{}, false, con.redisErr(err)
		}
		if ok {
			found = append(found, deadHit{q, ref})
		}
	}
	switch len(found) {
	case 0:
		return deadHit{}, false, nil
	case 1:
		return found[0], true, nil
	}
	var names []string
	for _, h := range found {
		names = append(names, h.q.Topic)
	}
	return deadHit{}, false, &admin.Error{Status: http.StatusConflict,
		Message: fmt.Sprintf("dead job %q is in the dead sets of topics %s", id, strings.Join(names, ", ")),
		Fix:     "name one: topic=<topic> (sluice dlq ... --topic <topic>)"}
}

func (con *Console) dlqEntry(r *http.Request, _ admin.Role) (any, error) {
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
		return con.kafkaEntry(r.Context(), q.Get("topic"), id)
	}
	h, ok, err := con.findDead(r, q.Get("topic"), id)
	if err != nil {
		return nil, err
	}
	if !ok {
		where := "any topic's dead set"
		if t := q.Get("topic"); t != "" {
			where = "topic " + t + "'s dead set"
		}
		return nil, notFound(fmt.Sprintf("no dead job %q in %s", id, where), "it may have been replayed, purged, or capped out (the workers' Config.DeadMax)")
	}
	refs := []queue.DeadRef{h.ref}
	if err := con.pool.DeadJobs(r.Context(), h.q, refs); err != nil {
		return nil, con.redisErr(err)
	}
	e := deadEntry(h.q, refs[0])
	env := refs[0].Fields["env"]
	if pe, err := queue.ParseEntry(env); err == nil {
		env = pe.Envelope
	}
	if json.Valid([]byte(env)) {
		e.Envelope = json.RawMessage(env)
	}
	return e, nil
}

func (con *Console) dlqReplay(r *http.Request, _ admin.Role) (any, error) {
	return con.dlqAct(r, true)
}

func (con *Console) dlqPurge(r *http.Request, _ admin.Role) (any, error) {
	return con.dlqAct(r, false)
}

// maxDLQIDs bounds the ids one request names.
const maxDLQIDs = 10000

func (con *Console) dlqAct(r *http.Request, replay bool) (any, error) {
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
		res, err = con.kafkaAct(r.Context(), act, replay)
	} else {
		res, err = con.deadAct(r, act, replay)
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

// deadAct replays or purges dead jobs, one script call each: the named
// ids (in act.Topic's dead sets, or found in every topic's), or all of
// act.Topic's ("": every topic's). An id more than one topic's dead sets
// hold is a 409 before anything is done.
func (con *Console) deadAct(r *http.Request, act admin.DLQAction, replay bool) (admin.DLQResult, error) {
	ctx := r.Context()
	var targets []deadHit
	missing := 0
	if act.All {
		topics, err := con.topics(r, act.Topic)
		if err != nil {
			return admin.DLQResult{}, err
		}
		for _, t := range topics {
			for part := range con.cfg.Partitions {
				q := queue.Queue{Topic: t, Part: part}
				refs, err := con.deadPage(r, q, -1, "", 1<<30)
				if err != nil {
					return admin.DLQResult{}, err
				}
				for _, ref := range refs {
					targets = append(targets, deadHit{q, ref})
				}
			}
		}
	} else {
		for _, id := range act.IDs {
			h, ok, err := con.findDead(r, act.Topic, id)
			if err != nil {
				return admin.DLQResult{}, err
			}
			if !ok {
				missing++
				continue
			}
			if replay { // a purge needs only the id; a replay, the envelope
				refs := []queue.DeadRef{h.ref}
				if err := con.pool.DeadJobs(ctx, h.q, refs); err != nil {
					return admin.DLQResult{}, con.redisErr(err)
				}
				h.ref = refs[0]
			}
			targets = append(targets, h)
		}
	}
	res := admin.DLQResult{}
	done := 0
	now := con.cfg.Now()
	for _, t := range targets {
		if !replay {
			ok, err := con.pool.PurgeDead(ctx, t.q, t.ref.ID)
			if err != nil {
				return res, con.redisErr(err)
			}
			if ok {
				done++
			} else {
				missing++
			}
			continue
		}
		e := decodeDead(t.ref.Fields["env"])
		out, err := con.pool.ReplayDead(ctx, t.q, t.ref.ID, now)
		if err != nil {
			return res, con.redisErr(err)
		}
		switch out {
		case queue.ReplayDone:
			done++
		case queue.ReplayCancelled:
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s (topic %s): its group %s was cancelled", t.ref.ID, t.q.Topic, e.Group))
		case queue.ReplayExpired:
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s (topic %s): its record had expired (the workers' Config.DeadTTL); taken off the dead set", t.ref.ID, t.q.Topic))
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
	con.log.Info("dead set changed", "replay", replay, "done", done, "missing", missing, "skipped", len(res.Skipped), "topic", act.Topic, "all", act.All)
	return res, nil
}
