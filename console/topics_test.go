package console_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/queue"
)

// The console over several topics: each topic is a queue, with keys of
// its own on every partition; the console reads every topic the relays
// registered (and Config.Topics).

// The admin API over two topics: a dead job of the second topic lists,
// shows and replays with its topic; an id dead in both topics is a 409
// naming them unless a topic chooses; paging finds every entry once even
// when two topics' entries share the time and the id.
func TestAdminDeadSetsOfTwoTopics(t *testing.T) {
	b := newBed(t, 2)
	b.register(t, "mail")
	c := b.start(t, "c1", nil)
	ctx := context.Background()
	qj, _ := b.deadJob(t, "dup", "", "jobs", "jobs failed")
	qm, envDup := b.deadJob(t, "dup", "", "mail", "mail failed")
	qm1, envM1 := b.deadJob(t, "m-1", "", "mail", "bounce")
	// Both "dup"s died in the same millisecond: a page may end between them.
	at := float64(time.Now().UnixMilli())
	for _, q := range []queue.Queue{qj, qm} {
		if err := b.redis.Client().ZAddXX(ctx, b.layout.Keys(q).Dead(), redis.Z{Score: at, Member: "dup"}).Err(); err != nil {
			t.Fatal(err)
		}
	}

	var list admin.DLQList
	c.must(t, "GET", "/api/v1/dlq?source=redis", nil, &list)
	got := map[string]string{}
	for _, e := range list.Entries {
		got[e.Topic+"/"+e.ID] = e.LastError
	}
	if len(list.Entries) != 3 || got["jobs/dup"] != "jobs failed" || got["mail/dup"] != "mail failed" || got["mail/m-1"] != "bounce" {
		t.Fatalf("every topic's dead jobs: %+v", list.Entries)
	}
	c.must(t, "GET", "/api/v1/dlq?source=redis&topic=mail", nil, &list)
	if len(list.Entries) != 2 || list.Entries[0].Topic != "mail" || list.Entries[1].Topic != "mail" {
		t.Errorf("topic mail's dead jobs: %+v", list.Entries)
	}
	var seen []string
	cursor := ""
	for range 5 {
		var page admin.DLQList
		c.must(t, "GET", "/api/v1/dlq?source=redis&limit=1&cursor="+cursor, nil, &page)
		for _, e := range page.Entries {
			seen = append(seen, e.Topic+"/"+e.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if slices.Sort(seen); !slices.Equal(seen, []string{"jobs/dup", "mail/dup", "mail/m-1"}) {
		t.Errorf("paging by one found %v", seen)
	}

	var e admin.DLQEntry
	c.must(t, "GET", "/api/v1/dlq/entry?source=redis&id=m-1", nil, &e)
	if e.Topic != "mail" || e.Partition != qm1.Part || e.LastError != "bounce" || string(e.Envelope) != string(envM1) {
		t.Errorf("entry of the second topic's job: %+v", e)
	}
	code, body := c.call(t, "GET", "/api/v1/dlq/entry?source=redis&id=dup", adminToken, nil)
	if msg := apiError(t, body).Message; code != http.StatusConflict || !strings.Contains(msg, "jobs, mail") {
		t.Errorf("entry of an id dead in two topics: %d %s", code, body)
	}
	c.must(t, "GET", "/api/v1/dlq/entry?source=redis&topic=mail&id=dup", nil, &e)
	if e.Topic != "mail" || e.LastError != "mail failed" || string(e.Envelope) != string(envDup) {
		t.Errorf("entry of mail's dup: %+v", e)
	}
	if code, body := c.call(t, "GET", "/api/v1/dlq/entry?source=redis&topic=nope&id=dup", adminToken, nil); code != 404 {
		t.Errorf("entry in a topic without it: %d %s", code, body)
	}

	// An ambiguous id refuses the whole request: nothing is replayed.
	code, body = c.call(t, "POST", "/api/v1/dlq/replay", adminToken, admin.DLQAction{Source: "redis", IDs: []string{"m-1", "dup"}})
	if code != http.StatusConflict || !strings.Contains(string(body), "jobs, mail") {
		t.Errorf("replay naming an id dead in two topics: %d %s", code, body)
	}
	c.must(t, "GET", "/api/v1/dlq?source=redis", nil, &list)
	if len(list.Entries) != 3 {
		t.Fatalf("a refused replay changed the dead sets: %+v", list.Entries)
	}
	var res admin.DLQResult
	c.must(t, "POST", "/api/v1/dlq/replay", admin.DLQAction{Source: "redis", Topic: "mail", IDs: []string{"dup", "m-1"}}, &res)
	if res.Replayed == nil || *res.Replayed != 2 || res.Missing != 0 {
		t.Fatalf("replay of mail's: %+v", res)
	}
	jobs := b.claimAll(t, "mail")
	if len(jobs) != 2 || jobs["dup"].Attempt != 1 || string(jobs["dup"].Envelope) != string(envDup) || jobs["m-1"].ID != "m-1" {
		t.Errorf("claimed from mail after the replay: %+v", jobs)
	}
	if n := len(b.claimAll(t, "jobs")); n != 0 {
		t.Errorf("%d jobs of topic jobs ready: jobs' dup was replayed too", n)
	}
	c.must(t, "GET", "/api/v1/dlq?source=redis", nil, &list)
	if len(list.Entries) != 1 || list.Entries[0].Topic != "jobs" || list.Entries[0].ID != "dup" {
		t.Errorf("left dead: %+v", list.Entries)
	}
	// No longer ambiguous: found in the one topic that holds it.
	c.must(t, "POST", "/api/v1/dlq/purge", admin.DLQAction{Source: "redis", IDs: []string{"dup"}}, &res)
	if res.Purged == nil || *res.Purged != 1 {
		t.Errorf("purge: %+v", res)
	}
	if code, body := c.call(t, "GET", "/api/v1/dlq?source=redis&topic=no:colons", adminToken, nil); code != 400 {
		t.Errorf("a topic that names no queue: %d %s", code, body)
	}
}

// Groups of the same name in two topics: reading or cancelling one by
// name alone is a 409 naming the topics, ?topic= chooses; the list shows
// each lane's topic and filters by topic; the partitions show each
// topic's queue.
func TestAdminGroupsOfTwoTopics(t *testing.T) {
	b := newBed(t, 2)
	b.register(t, "mail")
	c := b.start(t, "c1", nil)
	ctx := context.Background()
	for _, topic := range []string{"jobs", "mail"} {
		var items []queue.Item
		for i := range 3 {
			id := topic + "-" + string(rune('a'+i))
			items = append(items, queue.Item{ID: id, Group: "shared", Topic: topic, Weight: 1, GroupTotal: 3, Envelope: []byte(`{}`)})
		}
		items = append(items, queue.Item{Close: true, Group: "shared", Topic: topic, GroupTotal: 3})
		if _, err := b.pool.Enqueue(ctx, 1, items, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	part := b.layout.PartitionOf("shared")
	code, body := c.call(t, "GET", "/api/v1/groups/shared", adminToken, nil)
	if msg := apiError(t, body).Message; code != http.StatusConflict || !strings.Contains(msg, "jobs, mail") {
		t.Errorf("a group in two topics: %d %s", code, body)
	}
	if code, body := c.call(t, "POST", "/api/v1/groups/shared/cancel", adminToken, nil); code != http.StatusConflict {
		t.Errorf("cancel of a group in two topics: %d %s", code, body)
	}
	var cancel admin.CancelResult
	c.must(t, "POST", "/api/v1/groups/shared/cancel?topic=mail", nil, &cancel)
	if cancel.Removed != 3 {
		t.Errorf("cancel in mail: %+v", cancel)
	}
	var g admin.GroupInfo
	c.must(t, "GET", "/api/v1/groups/shared?topic=jobs", nil, &g)
	if g.Topic != "jobs" || g.Partition != part || g.Cancelled != 0 || g.Queued != 3 {
		t.Errorf("jobs' group after mail's was cancelled: %+v", g)
	}
	c.must(t, "GET", "/api/v1/groups/shared?topic=mail", nil, &g)
	if g.Topic != "mail" || g.Cancelled != 3 {
		t.Errorf("mail's cancelled group: %+v", g)
	}

	var list admin.GroupList
	c.must(t, "GET", "/api/v1/groups", nil, &list)
	if len(list.Active) != 1 || list.Active[0].Topic != "jobs" || list.Active[0].Group != "shared" || list.Active[0].Ready != 3 {
		t.Errorf("active lanes: %+v", list.Active)
	}
	if len(list.Bulk) != 2 || list.Bulk[0].Topic == list.Bulk[1].Topic {
		t.Errorf("bulk groups: %+v", list.Bulk)
	}
	c.must(t, "GET", "/api/v1/groups?topic=mail", nil, &list)
	if len(list.Active) != 0 || len(list.Bulk) != 1 || list.Bulk[0].Topic != "mail" {
		t.Errorf("topic mail's groups: %+v", list)
	}

	var parts admin.PartitionList
	c.must(t, "GET", "/api/v1/partitions", nil, &parts)
	p := parts.Partitions[part]
	if p.Ready != 3 || len(p.Queues) != 2 || p.Queues[0].Topic != "jobs" || p.Queues[0].Ready != 3 || p.Queues[1].Topic != "mail" || p.Queues[1].Ready != 0 {
		t.Errorf("partition %d: ready %d, queues %+v", part, p.Ready, p.Queues)
	}
}
