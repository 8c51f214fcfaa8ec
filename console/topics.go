package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/IBM/sarama"
	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/topics"
)

// The topics endpoints (docs/topics.md): a topic is created in Kafka (with
// its .retry and .dlq) and put in the stage's list in Consul, which the
// relays that follow it watch; ls and describe join the list, the relays'
// registry in Redis and Kafka's metadata; delete refuses a topic that
// still holds jobs unless forced.

// topicName is the request's {name}: a 400 when it cannot be a job topic.
func topicName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := topics.Valid(name); err != nil {
		return "", badRequest(err.Error(), "")
	}
	return name, nil
}

// kafkaView is what Kafka says of the job topics asked about.
type kafkaView struct {
	client sarama.Client
}

// state fills st's Kafka fields from the client's metadata.
func (v kafkaView) state(st *admin.TopicState) error {
	st.Kafka = []string{}
	for _, name := range topics.Kafka(st.Name) {
		parts, err := v.client.Partitions(name)
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			continue
		}
		if err != nil {
			return err
		}
		st.Kafka = append(st.Kafka, name)
		if name == st.Name && len(parts) > 0 {
			st.Partitions = len(parts)
			if reps, err := v.client.Replicas(name, parts[0]); err == nil {
				st.Replication = len(reps)
			}
		}
	}
	return nil
}

// problems says what keeps st's topic from being served, with the fix.
func problems(st *admin.TopicState, kafkaRead bool) []string {
	var out []string
	if kafkaRead {
		for _, name := range topics.Kafka(st.Name) {
			if !slices.Contains(st.Kafka, name) {
				out = append(out, fmt.Sprintf("Kafka has no topic %s: `sluice topics create %s` creates what is missing", name, st.Name))
			}
		}
	}
	if st.Relay == "" {
		out = append(out, "no relay holds its lock, so no job of it reaches Redis: start a relay that follows the topic list (sluice relay, --follow-topics, the default) or names it (--topics)")
	}
	return out
}

// relayHolder is who holds topic's relay lock ("": nobody).
func (con *Console) relayHolder(r *http.Request, topic string) (string, error) {
	key, err := con.key("relay", topic, "lock")
	if err != nil {
		return "", err
	}
	pair, _, err := con.kv().Get(key, (&consulapi.QueryOptions{}).WithContext(r.Context()))
	if err != nil {
		return "", con.consulErr(err)
	}
	if pair == nil || pair.Session == "" {
		return "", nil
	}
	return string(pair.Value), nil
}

// topicStates reads every topic of the stage (names nil) or those named:
// the list, the registry, Kafka (when the console has brokers) and the
// relay locks.
func (con *Console) topicStates(r *http.Request, names []string) ([]admin.TopicState, error) {
	listed, err := topics.List(r.Context(), con.kv(), con.cfg.Stage)
	if err != nil {
		return nil, con.consulErr(err)
	}
	registered, err := con.registered(r.Context())
	if err != nil {
		return nil, con.redisErr(err)
	}
	if names == nil {
		names = slices.Clone(registered)
		for n := range listed {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		slices.Sort(names)
	}
	var view *kafkaView
	if len(con.cfg.Kafka.Brokers) > 0 {
		client, err := con.kafkaClient()
		if err != nil {
			return nil, err
		}
		defer client.Close()
		view = &kafkaView{client: client}
	}
	out := make([]admin.TopicState, 0, len(names))
	for _, n := range names {
		st := admin.TopicState{Name: n, Registered: slices.Contains(registered, n)}
		if s, ok := listed[n]; ok {
			st.Listed = true
			created := s.Created
			st.Created = &created
		}
		if view != nil {
			if err := view.state(&st); err != nil {
				return nil, con.kafkaErr(err)
			}
		}
		if st.Relay, err = con.relayHolder(r, n); err != nil {
			return nil, err
		}
		st.Problems = problems(&st, view != nil)
		out = append(out, st)
	}
	return out, nil
}

// topicDepth sums topic's queue over every Redis partition.
func (con *Console) topicDepth(r *http.Request, topic string) (admin.QueueState, error) {
	q := admin.QueueState{Topic: topic}
	for part := range con.cfg.Partitions {
		f, err := con.pool.Funnel(r.Context(), queue.Queue{Topic: topic, Part: part})
		if err != nil {
			return q, con.redisErr(err)
		}
		q.Ready += f.Ready
		q.Delayed += f.Delayed
		q.Inflight += f.Inflight
		q.Dead += f.Dead
		q.Completed += f.Completed
		q.ActiveGroups += f.ActiveGroups
	}
	return q, nil
}

func (con *Console) topicList(r *http.Request, _ admin.Role) (any, error) {
	states, err := con.topicStates(r, nil)
	if err != nil {
		return nil, err
	}
	return admin.TopicList{Topics: states}, nil
}

// known reports whether st names a topic of the stage at all.
func known(st admin.TopicState) bool {
	return st.Listed || st.Registered || slices.Contains(st.Kafka, st.Name)
}

func (con *Console) topicGet(r *http.Request, _ admin.Role) (any, error) {
	name, err := topicName(r)
	if err != nil {
		return nil, err
	}
	states, err := con.topicStates(r, []string{name})
	if err != nil {
		return nil, err
	}
	st := states[0]
	if !known(st) {
		return nil, notFound(fmt.Sprintf("no topic %q: not in the stage's list, not relayed, not in Kafka", name), "`sluice topics ls` lists the topics; `sluice topics create "+name+"` creates it")
	}
	q, err := con.topicDepth(r, name)
	if err != nil {
		return nil, err
	}
	st.Queue = &q
	return st, nil
}

// topicCreate creates the topic's Kafka topics that are missing and puts
// it in the stage's list. A topic already listed is a 409; one that Kafka
// has but the list does not (created by sluice dev, a deploy script, or a
// create that failed half-way) is completed and listed.
func (con *Console) topicCreate(r *http.Request, _ admin.Role) (any, error) {
	var req admin.TopicCreate
	if err := decodeBody(r, &req); err != nil {
		return nil, err
	}
	if err := topics.Valid(req.Name); err != nil {
		return nil, badRequest(err.Error(), "")
	}
	if req.Partitions == 0 {
		req.Partitions = topics.DefaultPartitions
	}
	key, err := topics.Key(con.cfg.Stage, req.Name)
	if err != nil {
		return nil, badRequest(err.Error(), "")
	}
	pair, _, err := con.kv().Get(key, (&consulapi.QueryOptions{}).WithContext(r.Context()))
	if err != nil {
		return nil, con.consulErr(err)
	}
	if pair != nil {
		return nil, &admin.Error{Status: http.StatusConflict, Message: fmt.Sprintf("topic %q exists already", req.Name),
			Fix: "`sluice topics describe " + req.Name + "` shows it"}
	}
	client, err := con.kafkaClient()
	if err != nil {
		return nil, err
	}
	defer client.Close()
	brokers := len(client.Brokers())
	if req.Replication == 0 {
		req.Replication = max(1, min(topics.DefaultReplication, brokers))
	}
	if err := topics.CheckSize(req.Partitions, req.Replication, brokers); err != nil {
		return nil, badRequest(err.Error(), "")
	}
	existing := map[string]sarama.TopicDetail{}
	for _, name := range topics.Kafka(req.Name) {
		if parts, err := client.Partitions(name); err == nil {
			existing[name] = sarama.TopicDetail{NumPartitions: int32(len(parts))}
		} else if !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return nil, con.kafkaErr(err)
		}
	}
	adm, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return nil, con.kafkaErr(err)
	}
	// Not closed: closing it closes the client, closed above.
	created, err := topics.CreateKafka(adm, existing, req.Name, req.Partitions, req.Replication)
	if err != nil {
		return nil, con.kafkaErr(err)
	}
	if len(created) > 0 {
		con.log.Info("Kafka topics created", "topics", fmt.Sprint(created), "partitions", req.Partitions, "replication", req.Replication)
	}
	spec := topics.Spec{Partitions: req.Partitions, Replication: req.Replication, Created: con.cfg.Now().UTC()}
	if p, ok := existing[req.Name]; ok {
		spec.Partitions = int(p.NumPartitions) // Kafka's, not the request's
	}
	value, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	// Check-and-set on "absent": two creates at once list it once.
	ok, _, err := con.kv().CAS(&consulapi.KVPair{Key: key, Value: value, ModifyIndex: 0}, (&consulapi.WriteOptions{}).WithContext(r.Context()))
	if err != nil {
		return nil, con.consulErr(err)
	}
	if !ok {
		return nil, &admin.Error{Status: http.StatusConflict, Message: fmt.Sprintf("topic %q was created by another request meanwhile", req.Name),
			Fix: "`sluice topics describe " + req.Name + "` shows it"}
	}
	if err := client.RefreshMetadata(topics.Kafka(req.Name)...); err != nil {
		con.log.Warn("reading the new topic's metadata failed", "topic", req.Name, "err", err)
	}
	out := admin.TopicCreated{TopicState: admin.TopicState{Name: req.Name, Listed: true, Created: &spec.Created}, CreatedKafka: created}
	if out.CreatedKafka == nil {
		out.CreatedKafka = []string{}
	}
	if err := (kafkaView{client: client}).state(&out.TopicState); err != nil {
		return nil, con.kafkaErr(err)
	}
	return out, nil
}

// unrelayed counts topic's records in Kafka that its relay has not
// committed: jobs waiting in Kafka (a paused rate, no relay running).
func unrelayed(client sarama.Client, group, topic string) (int64, error) {
	parts, err := client.Partitions(topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	committed, err := kafka.GroupOffsets(client, kafka.RelayGroup(group, topic), topic, parts)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, p := range parts {
		newest, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return 0, err
		}
		from, ok := committed[p]
		if !ok || from < 0 {
			if from, err = client.GetOffset(topic, p, sarama.OffsetOldest); err != nil {
				return 0, err
			}
		}
		n += max(0, newest-from)
	}
	return n, nil
}

// topicDelete deletes a topic: out of the stage's list (its relays let it
// go), its Kafka topics deleted, out of the relays' registry. It refuses
// (409) while the topic holds jobs, in Kafka not yet relayed or in Redis
// ready, delayed or running, and a topic not in the list (a relay serves
// it by --topics, and would stop on finding its Kafka topic gone), unless
// ?force=true. Redis keeps the queue's keys (docs/topics.md#delete).
func (con *Console) topicDelete(r *http.Request, _ admin.Role) (any, error) {
	name, err := topicName(r)
	if err != nil {
		return nil, err
	}
	force := false
	if v := r.URL.Query().Get("force"); v != "" {
		if force, err = strconv.ParseBool(v); err != nil {
			return nil, badRequest(fmt.Sprintf("force=%q: want true or false", v), "")
		}
	}
	states, err := con.topicStates(r, []string{name})
	if err != nil {
		return nil, err
	}
	st := states[0]
	if !known(st) {
		return nil, notFound(fmt.Sprintf("no topic %q: not in the stage's list, not relayed, not in Kafka", name), "`sluice topics ls` lists the topics")
	}
	depth, err := con.topicDepth(r, name)
	if err != nil {
		return nil, err
	}
	client, err := con.kafkaClient()
	if err != nil {
		return nil, err
	}
	defer client.Close()
	waiting, err := unrelayed(client, con.cfg.ConsumerGroup, name)
	if err != nil {
		return nil, con.kafkaErr(err)
	}
	held := depth.Ready + depth.Delayed + depth.Inflight
	if !force {
		switch {
		case !st.Listed:
			return nil, &admin.Error{Status: http.StatusConflict,
				Message: fmt.Sprintf("topic %q is not in the stage's topic list: a relay serves it by its --topics, and would stop once its Kafka topic is gone", name),
				Fix:     "take it out of the relays' --topics first, then delete with --force"}
		case waiting > 0 || held > 0:
			return nil, &admin.Error{Status: http.StatusConflict,
				Message: fmt.Sprintf("topic %q still holds jobs: %d in Kafka not yet relayed, %d ready, %d delayed, %d running", name, waiting, depth.Ready, depth.Delayed, depth.Inflight),
				Fix:     "let its workers drain it (`sluice topics describe " + name + "`), or delete with --force: the jobs in Kafka are lost, those in Redis stay for workers that serve the topic"}
		}
	}
	out := admin.TopicDeleted{Name: name, DeletedKafka: []string{}, Left: held + depth.Dead}
	// The list first, so that relays following it let the topic go before
	// its Kafka topics disappear under them.
	if st.Listed {
		key, err := topics.Key(con.cfg.Stage, name)
		if err != nil {
			return nil, badRequest(err.Error(), "")
		}
		if _, err := con.kv().Delete(key, (&consulapi.WriteOptions{}).WithContext(r.Context())); err != nil {
			return nil, con.consulErr(err)
		}
		out.Unlisted = true
	}
	adm, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return nil, con.kafkaErr(err)
	}
	for _, k := range st.Kafka {
		if err := adm.DeleteTopic(k); err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return out, con.kafkaErr(fmt.Errorf("deleting Kafka topic %s: %w", k, err))
		}
		out.DeletedKafka = append(out.DeletedKafka, k)
	}
	if out.Unregistered, err = con.pool.UnregisterTopic(r.Context(), name); err != nil {
		return out, con.redisErr(err)
	}
	con.log.Info("topic deleted", "topic", name, "kafka", fmt.Sprint(out.DeletedKafka), "forced", force, "left_in_redis", out.Left, "lost_in_kafka", waiting)
	return out, nil
}
