package console

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
)

// The relay's <topic>.dlq (docs/admin.md#dead-letters). Kafka deletes
// records only as a prefix of a partition (DeleteRecords moves its log
// start offset), so a replay or purge by ids must name a partition's
// oldest records, and the list reads oldest first.

// A record replayed from a DLQ goes without the relay's headers
// (kafka.HeaderDLQReason, HeaderSource, HeaderRequeues): it is a fresh
// attempt, with the relay's requeue count started over.

// valueExcerpt is how much of a record's value a list shows.
const valueExcerpt = 1024

// kafkaClient connects to the configured brokers; no brokers is a 503
// that names the setting.
func (con *Console) kafkaClient() (sarama.Client, error) {
	cfg := con.cfg.Kafka
	if len(cfg.Brokers) == 0 {
		return nil, &admin.Error{Status: http.StatusServiceUnavailable, Message: "the console has no Kafka brokers configured",
			Fix: "set " + con.setting("Kafka.Brokers") + " to the relays' brokers, host:port"}
	}
	sc, err := cfg.Sarama()
	if err != nil {
		return nil, con.kafkaErr(err)
	}
	sc.Consumer.Return.Errors = true
	// An operator waits for the answer: a Kafka that is down is said in
	// seconds, not after sarama's 30 s dial and its metadata retries.
	sc.Net.DialTimeout = 5 * time.Second
	sc.Metadata.Retry.Max = 1
	client, err := cfg.Connect(context.Background(), sc) // its diagnosis has its own time limits
	if err != nil {
		return nil, con.kafkaErr(err)
	}
	return client, nil
}

// openDLQ connects to Kafka and reads <topic>.dlq's partitions, sorted; an
// unknown topic is a 404. The caller closes the client.
func (con *Console) openDLQ(topic string) (client sarama.Client, dlq string, parts []int32, err error) {
	if client, err = con.kafkaClient(); err != nil {
		return nil, "", nil, err
	}
	if dlq, parts, err = con.dlqPartitions(client, topic); err != nil {
		client.Close()
		return nil, "", nil, err
	}
	return client, dlq, parts, nil
}

// dlqPartitions are <topic>.dlq's partitions, sorted; an unknown topic is
// a 404.
func (con *Console) dlqPartitions(client sarama.Client, topic string) (string, []int32, error) {
	if topic == "" {
		return "", nil, badRequest("no topic", "name the job topic (its <topic>.dlq is read), e.g. topic=jobs")
	}
	dlq := kafka.DLQTopic(topic)
	parts, err := client.Partitions(dlq)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return "", nil, notFound(fmt.Sprintf("Kafka has no topic %s", dlq), "name a job topic whose relay has a DLQ topic")
	}
	if err != nil {
		return "", nil, con.kafkaErr(err)
	}
	parts = slices.Clone(parts)
	slices.Sort(parts)
	return dlq, parts, nil
}

// bounds are a partition's log start and end offsets.
func (con *Console) bounds(client sarama.Client, topic string, p int32) (oldest, newest int64, err error) {
	if oldest, err = client.GetOffset(topic, p, sarama.OffsetOldest); err != nil {
		return 0, 0, con.kafkaErr(err)
	}
	if newest, err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
		return 0, 0, con.kafkaErr(err)
	}
	return oldest, newest, nil
}

// readRange reads partition p's records from offset from up to (not
// including) to, at most max of them.
func (con *Console) readRange(ctx context.Context, client sarama.Client, topic string, p int32, from, to int64, max int) ([]*sarama.ConsumerMessage, error) {
	if from >= to || max <= 0 {
		return nil, nil
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, con.kafkaErr(err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, p, from)
	if err != nil {
		return nil, con.kafkaErr(fmt.Errorf("reading %s/%d from offset %d: %w", topic, p, from, err))
	}
	defer pc.Close()
	var out []*sarama.ConsumerMessage
	for len(out) < max {
		select {
		case m := <-pc.Messages():
			if m.Offset >= to {
				return out, nil
			}
			out = append(out, m)
			if m.Offset+1 >= to {
				return out, nil
			}
		case err := <-pc.Errors():
			return nil, con.kafkaErr(err)
		case <-ctx.Done():
			return nil, con.kafkaErr(fmt.Errorf("reading %s/%d up to offset %d: %w", topic, p, to, ctx.Err()))
		}
	}
	return out, nil
}

// parseKafkaID reads a DLQ record's id, "<partition>:<offset>".
func parseKafkaID(s string) (int32, int64, error) {
	ps, os, ok := strings.Cut(strings.TrimSpace(s), ":")
	p, err1 := strconv.ParseInt(ps, 10, 32)
	off, err2 := strconv.ParseInt(os, 10, 64)
	if !ok || err1 != nil || err2 != nil || p < 0 || off < 0 {
		return 0, 0, badRequest(fmt.Sprintf("Kafka DLQ id %q: want <partition>:<offset>", s), "")
	}
	return int32(p), off, nil
}

// parseKafkaCursor reads a Kafka DLQ cursor: "<partition>:<next offset>"
// pairs, comma-separated.
func parseKafkaCursor(s string) (map[int32]int64, error) {
	out := map[int32]int64{}
	if s == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, ",") {
		p, off, err := parseKafkaID(pair)
		if err != nil {
			return nil, badRequest(fmt.Sprintf("cursor %q: want the next_cursor of the page before", s), "")
		}
		out[p] = off
	}
	return out, nil
}

func kafkaEntry(m *sarama.ConsumerMessage, whole bool) admin.DLQEntry {
	off := m.Offset
	e := admin.DLQEntry{ID: fmt.Sprintf("%d:%d", m.Partition, m.Offset), Partition: int(m.Partition), Offset: &off,
		Key: strings.ToValidUTF8(string(m.Key), "\uFFFD"), ValueBytes: len(m.Value)}
	if !m.Timestamp.IsZero() {
		ts := m.Timestamp
		e.Timestamp = &ts
	}
	for _, h := range m.Headers {
		if h == nil {
			continue
		}
		switch string(h.Key) {
		case kafka.HeaderDLQReason:
			e.Reason = string(h.Value)
		case kafka.HeaderSource:
			e.SourceRecord = string(h.Value)
		}
		if whole {
			if e.Headers == nil {
				e.Headers = map[string]string{}
			}
			e.Headers[string(h.Key)] = strings.ToValidUTF8(string(h.Value), "\uFFFD")
		}
	}
	switch {
	case !whole:
		v := m.Value
		if len(v) > valueExcerpt {
			v = v[:valueExcerpt]
		}
		e.Value = strings.ToValidUTF8(string(v), "\uFFFD")
	case utf8.Valid(m.Value):
		e.Value = string(m.Value)
	default:
		e.ValueBase64 = base64.StdEncoding.EncodeToString(m.Value)
	}
	return e
}

func (con *Console) kafkaList(ctx context.Context, topic string, limit int, cursor string) (any, error) {
	from, err := parseKafkaCursor(cursor)
	if err != nil {
		return nil, err
	}
	client, dlq, parts, err := con.openDLQ(topic)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	out := admin.DLQList{Source: admin.SourceKafka, Topic: topic, Entries: []admin.DLQEntry{}}
	var next []string
	more := false
	for _, p := range parts {
		oldest, newest, err := con.bounds(client, dlq, p)
		if err != nil {
			return nil, err
		}
		start := oldest
		if c, ok := from[p]; ok && c > start {
			start = c
		}
		msgs, err := con.readRange(ctx, client, dlq, p, start, newest, limit-len(out.Entries))
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			out.Entries = append(out.Entries, kafkaEntry(m, false))
			start = m.Offset + 1
		}
		if start < newest {
			more = true
		}
		next = append(next, fmt.Sprintf("%d:%d", p, start))
	}
	if more {
		out.NextCursor = strings.Join(next, ",")
	}
	return out, nil
}

func (con *Console) kafkaEntry(ctx context.Context, topic, id string) (any, error) {
	p, off, err := parseKafkaID(id)
	if err != nil {
		return nil, err
	}
	client, dlq, parts, err := con.openDLQ(topic)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	if !slices.Contains(parts, p) {
		return nil, notFound(fmt.Sprintf("%s has no partition %d", dlq, p), "")
	}
	oldest, newest, err := con.bounds(client, dlq, p)
	if err != nil {
		return nil, err
	}
	if off < oldest || off >= newest {
		return nil, notFound(fmt.Sprintf("no record %s in %s (its partition holds offsets %d..%d)", id, dlq, oldest, newest-1),
			"it may have been replayed or purged already")
	}
	msgs, err := con.readRange(ctx, client, dlq, p, off, off+1, 1)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 || msgs[0].Offset != off {
		return nil, notFound(fmt.Sprintf("no record %s in %s", id, dlq), "")
	}
	return kafkaEntry(msgs[0], true), nil
}

// kafkaPlan is what a replay or purge does to one partition: delete up to
// (not including) upto, after replaying msgs.
type kafkaPlan struct {
	p    int32
	upto int64
	msgs []*sarama.ConsumerMessage
}

// kafkaAct replays or purges DLQ records. Everything is checked before
// anything is done: ids that are not a partition's oldest records refuse
// the whole request.
func (con *Console) kafkaAct(ctx context.Context, act admin.DLQAction, replay bool) (admin.DLQResult, error) {
	named := map[int32]map[int64]bool{}
	for _, id := range act.IDs {
		p, off, err := parseKafkaID(id)
		if err != nil {
			return admin.DLQResult{}, err
		}
		if named[p] == nil {
			named[p] = map[int64]bool{}
		}
		named[p][off] = true
	}
	client, dlq, parts, err := con.openDLQ(act.Topic)
	if err != nil {
		return admin.DLQResult{}, err
	}
	defer client.Close()
	missing := 0
	var plans []kafkaPlan
	for _, p := range parts {
		ids := named[p]
		if !act.All && len(ids) == 0 {
			continue
		}
		oldest, newest, err := con.bounds(client, dlq, p)
		if err != nil {
			return admin.DLQResult{}, err
		}
		plan := kafkaPlan{p: p, upto: newest}
		if !act.All {
			plan.upto = oldest
			for off := range ids {
				if off < oldest || off >= newest {
					missing++
					delete(ids, off)
				} else if off+1 > plan.upto {
					plan.upto = off + 1
				}
			}
			if len(ids) == 0 {
				continue
			}
		}
		if replay || !act.All {
			msgs, err := con.readRange(ctx, client, dlq, p, oldest, plan.upto, int(plan.upto-oldest))
			if err != nil {
				return admin.DLQResult{}, err
			}
			for _, m := range msgs {
				if !act.All && !ids[m.Offset] {
					return admin.DLQResult{}, badRequest(
						fmt.Sprintf("%s partition %d: record %d:%d comes before the ones named and is not named: Kafka deletes a partition's records only oldest first", dlq, p, p, m.Offset),
						"name every record from the partition's oldest up to the last one you mean (sluice dlq ls lists them oldest first), or use --all")
				}
			}
			plan.msgs = msgs
		}
		plans = append(plans, plan)
	}
	done := 0
	if replay {
		var msgs []kafka.Message
		for _, plan := range plans {
			for _, m := range plan.msgs {
				msgs = append(msgs, replayMessage(act.Topic, m))
			}
		}
		if len(msgs) > 0 {
			if err := con.produce(ctx, msgs); err != nil {
				return admin.DLQResult{}, err
			}
			if err := con.pool.CountMilestone(ctx, act.Topic, queue.MilestoneDLQReplayed, false, int64(len(msgs))); err != nil {
				// Produced already: the count is only the funnel's.
				con.log.Warn("counting replayed DLQ records failed; the funnel will show them as unexplained", "topic", act.Topic, "count", len(msgs), "err", err)
			}
		}
		done = len(msgs)
	}
	upto := map[int32]int64{}
	for _, plan := range plans {
		upto[plan.p] = plan.upto
		if !replay {
			if act.All {
				oldest, _, err := con.bounds(client, dlq, plan.p)
				if err != nil {
					return admin.DLQResult{}, err
				}
				done += int(max(plan.upto-oldest, 0))
			} else {
				done += len(plan.msgs)
			}
		}
	}
	if len(upto) > 0 {
		if err := con.deleteRecords(client, dlq, upto); err != nil {
			return admin.DLQResult{}, err
		}
	}
	res := admin.DLQResult{Missing: missing}
	if replay {
		res.Replayed = &done
	} else {
		res.Purged = &done
	}
	con.log.Info("Kafka DLQ changed", "topic", dlq, "replay", replay, "done", done, "missing", missing, "deleted_up_to", upto)
	return res, nil
}

// replayMessage is a dead letter produced anew to its topic: key, value
// and headers as they came, without the relay's.
func replayMessage(topic string, m *sarama.ConsumerMessage) kafka.Message {
	var headers []sarama.RecordHeader
	for _, h := range m.Headers {
		if h == nil {
			continue
		}
		switch string(h.Key) {
		case kafka.HeaderDLQReason, kafka.HeaderSource, kafka.HeaderRequeues:
			continue
		}
		headers = append(headers, *h)
	}
	return kafka.Message{Topic: topic, Key: m.Key, Value: m.Value, Partition: -1, Headers: headers}
}

// produce writes msgs with acks=all and the murmur2 key partitioner (the
// gate's producer), each one or the request fails.
func (con *Console) produce(ctx context.Context, msgs []kafka.Message) error {
	cfg := con.cfg.Kafka
	prod, err := kafka.NewProducer(&cfg, kafka.ProducerOptions{}, con.log)
	if err != nil {
		return con.kafkaErr(err)
	}
	defer prod.Close()
	res, err := prod.Produce(ctx, kafka.AcksAll, msgs)
	if err != nil {
		return con.kafkaErr(err)
	}
	for _, r := range res {
		if r.Err != nil {
			// Some may be written: a replay again writes them twice, which
			// the relay's dedupe by job id absorbs. Nothing is deleted.
			return con.kafkaErr(fmt.Errorf("producing to %s: %w (nothing was deleted from the DLQ; replaying again is safe: the relay dedupes by job id)", msgs[0].Topic, r.Err))
		}
	}
	return nil
}

func (con *Console) deleteRecords(client sarama.Client, topic string, upto map[int32]int64) error {
	adm, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return con.kafkaErr(err)
	}
	// Not closed: closing it closes the shared client, which the caller
	// closes.
	if err := adm.DeleteRecords(topic, upto); err != nil {
		return con.kafkaErr(fmt.Errorf("deleting records of %s up to %v: %w", topic, upto, err))
	}
	return nil
}
