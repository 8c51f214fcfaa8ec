package relay_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/stack"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestApacheKafkaUncleanElectionTruncatesTheLog stages a real unclean
// leader election on three brokers and a dedicated KRaft controller (with
// every broker a controller, two brokers down is the quorum lost and no
// election happens at all; docs/chaos.md). The job topic has replication
// factor 3, min.insync.replicas 1 and unclean.leader.election.enable:
//
//  1. records acknowledged (acks=all) by all three and relayed;
//  2. followers 2 and 3 stopped: broker 1, alone in the in-sync set,
//     acknowledges (acks=all) the next records, and the relay moves them
//     to Redis, so its watermark passes them;
//  3. the relay stopped, broker 1 killed, broker 2 started: out of the
//     in-sync set, it is elected uncleanly, and the log ends where broker 2
//     stopped, below the watermark: Kafka lost the records of step 2;
//  4. new records, written at offsets the old watermarks hold, then a new
//     relay: every one of them must reach Redis, none taken for a duplicate
//     of the lost records (relay/logid.go lowerTruncated). They are fewer
//     than the lost ones, so the log's end stays below the watermarks of
//     the Redis partitions that took the last lost records (the proof of
//     the truncation), and more than the others' (which took their last
//     lost records earlier): those are lowered too, on that proof.
func TestApacheKafkaUncleanElectionTruncatesTheLog(t *testing.T) {
	const (
		perPart = 50 // records per Kafka partition in steps 1 and 2
		newPer  = 45 // and in step 4: the log grows back past some watermarks, not all
		leaderA = int32(1)
		laggerB = int32(2)
		otherC  = int32(3)
	)
	k := testenv.Kafka(t, testenv.ApacheKafka(), testenv.Brokers(3), testenv.KafkaDedicatedController(),
		// On the brokers too: Kafka's own offsets topic (the relay's
		// committed offsets) is left without a leader in step 3 otherwise.
		testenv.KafkaProperty("unclean.leader.election.enable", "true"),
		// The controller's sweep of leaderless partitions, 5 minutes by
		// default, behind the election it runs when a broker comes back.
		testenv.KafkaProperty("unclean.leader.election.interval.ms", "1000"),
		testenv.Topic(topic+".dlq", 1))
	k.CreateTopicWith(topic, kParts, map[string]string{
		"unclean.leader.election.enable": "true",
		// Broker 1 alone acknowledges acks=all writes in step 2.
		"min.insync.replicas": "1",
	})
	b := &bed{
		kafka:  k,
		redis:  testenv.Redis(t),
		consul: testenv.Consul(t),
		layout: queue.Keyspace{Stage: "test", Partitions: kParts},
		sent:   map[string][]byte{},
	}
	b.prod = b.newProducer(t)
	// A partition's state, or ok false while the brokers cannot say (a
	// broker stopping or starting drops the admin client's connections).
	partition := func(p int32) (st stack.PartitionState, ok bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := k.Real().Partition(ctx, topic, p)
		if err != nil {
			t.Logf("reading %s/%d's leader: %v", topic, p, err)
			return st, false
		}
		return st, true
	}

	// Step 1: every replica has these.
	b.produceAcked(t, 0, perPart*kParts)
	r1 := b.start(t, "r1", nil)
	b.waitRelayed(t, perPart*kParts, 60*time.Second)
	testenv.WaitFor(t, 30*time.Second, "every offset committed", func() bool {
		return b.committed(t, "sluice-relay."+topic) == perPart*kParts
	})

	// Step 2: the followers leave (a graceful stop takes them out of the
	// in-sync set at once); broker 1 leads every partition alone.
	k.StopBroker(laggerB)
	k.StopBroker(otherC)
	before := map[int32]int32{} // leader epochs
	for p := range int32(kParts) {
		testenv.WaitFor(t, 30*time.Second, "broker 1 alone in the in-sync set of "+topic+"/"+strconv.Itoa(int(p)), func() bool {
			st, ok := partition(p)
			before[p] = st.LeaderEpoch
			return ok && st.Leader == leaderA && slices.Equal(st.ISR, []int32{leaderA})
		})
	}
	b.produceAcked(t, perPart*kParts, perPart*kParts)
	b.waitRelayed(t, 2*perPart*kParts, 60*time.Second)
	endBefore := b.logEnds(t)
	r1.stop(t)
	watermarks := b.watermarks(t)

	// Step 3: the leader dies; broker 2, not in the in-sync set, is the
	// only replica left to lead.
	k.KillBroker(leaderA)
	k.StartBroker(laggerB)
	for p := range int32(kParts) {
		var st stack.PartitionState
		testenv.WaitFor(t, 60*time.Second, "an unclean leader for "+topic+"/"+strconv.Itoa(int(p)), func() bool {
			var ok bool
			st, ok = partition(p)
			return ok && st.Leader == laggerB
		})
		if st.LeaderEpoch <= before[p] {
			t.Fatalf("%s/%d: leader epoch %d after the election, %d before: no new election", topic, p, st.LeaderEpoch, before[p])
		}
	}
	// The new leader's log ends where broker 2 stopped: below what the
	// relay applied. (Its high watermark may lag its log for a moment.)
	var endAfter map[int32]int64
	testenv.WaitFor(t, 30*time.Second, "the logs' ends to settle after the election", func() bool {
		endAfter = b.logEnds(t)
		for _, end := range endAfter {
			if end != perPart {
				return false
			}
		}
		return true
	})
	lost := int64(0)
	for p, end := range endAfter {
		if endBefore[p] != 2*perPart {
			t.Fatalf("%s/%d ended at %d before the election, want %d", topic, p, endBefore[p], 2*perPart)
		}
		lost += endBefore[p] - end
	}
	ctrlLog, err := os.ReadFile(k.Real().LogFile(k.Real().Controller()))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the controller logged %d leaders elected uncleanly (\"using an unclean election\") and %d unclean elections its sweep triggered",
		strings.Count(string(ctrlLog), "using an unclean election"), strings.Count(string(ctrlLog), "Triggering unclean leader election"))
	t.Logf("the unclean election truncated every partition from %d to %d records: %d records acknowledged (acks=all, by broker 1 alone) are gone from Kafka (the relay had moved them to Redis before)", 2*perPart, perPart, lost)
	// Broker 3 follows the new leader (truncating to its log) before
	// the new records, so they are replicated too.
	k.StartBroker(otherC)

	// Step 4: a new producer (the old one's sequence numbers belong to the
	// lost log) writes at offsets the old watermark holds.
	b.prod = b.newProducer(t)
	from := 2 * perPart * kParts
	newRes := b.produceAcked(t, from, newPer*kParts)
	for _, r := range newRes {
		if r.Offset >= endBefore[r.Partition] {
			t.Fatalf("%s/%d: a new record at offset %d, past the old log's end %d: not a reused offset", topic, r.Partition, r.Offset, endBefore[r.Partition])
		}
	}
	// What the new relay must lower: every watermark of a truncated log
	// (one with a watermark at or past its end) at or past the offset it
	// resumes at, the committed one (perPart). hidden counts the new
	// records at or below a watermark that is not itself past the log's
	// end: what a relay that lowered only those would drop.
	endNow := b.logEnds(t)
	proof := map[int32]bool{}
	for _, byKP := range watermarks {
		for kp, wm := range byKP {
			proof[kp] = proof[kp] || wm >= endNow[kp]
		}
	}
	truncated, behind := 0, 0
	for _, byKP := range watermarks {
		for kp, wm := range byKP {
			if proof[kp] && wm >= perPart {
				truncated++
				if wm < endNow[kp] {
					behind++
				}
			}
		}
	}
	hidden := 0
	for i, r := range newRes { // in the order written: job from+i
		wm, ok := watermarks[b.layout.PartitionOf("g"+strconv.Itoa((from+i)/10))][r.Partition]
		if ok && wm < endNow[r.Partition] && r.Offset <= wm {
			hidden++
		}
	}
	if len(proof) != kParts || truncated == 0 {
		t.Fatalf("watermarks %v against the logs' ends %v: not every log shows its truncation", watermarks, endNow)
	}
	if hidden == 0 {
		t.Fatalf("watermarks %v against the logs' ends %v: no new record lies below a watermark the log grew back past; the test lost its point", watermarks, endNow)
	}
	r2 := b.start(t, "r2", nil)
	total := from + newPer*kParts
	var sum int64
	for _, end := range endNow {
		sum += end
	}
	// Wait for the relay to have read the logs to their ends, then look.
	testenv.WaitFor(t, 60*time.Second, "r2's offsets committed to the logs' ends", func() bool {
		return b.committed(t, "sluice-relay."+topic) == sum
	})
	var missing []string
	for i := from; i < total; i++ {
		if id := "j" + strconv.Itoa(i); !b.onLane(t, "g"+strconv.Itoa(i/10), id) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of the %d records written after the unclean election never reached Redis (%v taken for duplicates): %v",
			len(missing), newPer*kParts, metricLabeled(t, r2.relay, "sluice_relay_jobs_total", "outcome", "duplicate"), missing)
	}
	b.waitRelayed(t, total, 30*time.Second)
	for i := from; i < total; i++ {
		id := "j" + strconv.Itoa(i)
		if e := b.entry(t, "g"+strconv.Itoa(i/10), id); e.Envelope != string(b.sent[id]) {
			t.Fatalf("job %s written after the unclean election: %+v", id, e)
		}
	}
	if d := metricLabeled(t, r2.relay, "sluice_relay_jobs_total", "outcome", "duplicate"); d != 0 {
		t.Fatalf("r2 took %v records for duplicates", d)
	}
	if n := metric(t, r2.relay, "sluice_relay_watermark_truncations_total"); n != float64(truncated) {
		t.Fatalf("sluice_relay_watermark_truncations_total %v, want %d (one per watermark of a truncated log at or past the resume offset)", n, truncated)
	}
	t.Logf("after the election: %d new records written at reused offsets (%d of them at or below a watermark the log had grown back past), all relayed, none taken for a duplicate; %d watermarks lowered (sluice_relay_watermark_truncations_total), %d of them below the log's end; Redis holds %d jobs, each once",
		newPer*kParts, hidden, truncated, behind, total)
}

// produceAcked writes n jobs j<from>..j<from+n-1> with acks=all, job i to
// Kafka partition i%kParts (each partition gets its share), fails the test
// on any error and returns where each went.
func (b *bed) produceAcked(t *testing.T, from, n int) []kafka.Result {
	t.Helper()
	msgs := make([]kafka.Message, 0, n)
	for i := from; i < from+n; i++ {
		id, group := "j"+strconv.Itoa(i), "g"+strconv.Itoa(i/10)
		b.sent[id] = envelope(id, group)
		msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(group), Value: b.sent[id], Partition: int32(i % kParts)})
	}
	res, err := b.prod.Produce(context.Background(), kafka.AcksAll, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("producing with acks=all: %v", r.Err)
		}
	}
	return res
}

// newProducer is a producer on the bed's brokers, closed with the test.
func (b *bed) newProducer(t *testing.T) *kafka.Producer {
	t.Helper()
	kcfg := kafka.Config{Brokers: b.kafka.Brokers(), ClientID: "test", Version: "3.6.0", Compression: "none"}
	p, err := kafka.NewProducer(&kcfg, kafka.ProducerOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// logEnds is each Kafka partition's end offset (the next offset Kafka
// writes), as a consumer and the relay see it.
func (b *bed) logEnds(t *testing.T) map[int32]int64 {
	t.Helper()
	client, err := sarama.NewClient(b.kafka.Brokers(), sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ends := map[int32]int64{}
	for p := range int32(kParts) {
		if ends[p], err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			t.Fatalf("end offset of %s/%d: %v", topic, p, err)
		}
	}
	return ends
}

// watermarks is every Redis partition's watermark by Kafka partition.
func (b *bed) watermarks(t *testing.T) map[int]map[int32]int64 {
	t.Helper()
	out := map[int]map[int32]int64{}
	for rp := range b.layout.Partitions {
		fields, err := b.redis.Client().HGetAll(context.Background(), b.layout.Keys(queue.Queue{Topic: topic, Part: rp}).Watermark()).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[rp] = map[int32]int64{}
		for f, v := range fields {
			if strings.Contains(f, ":") { // the topic id beside the offset
				continue
			}
			kp, err1 := strconv.ParseInt(f, 10, 32)
			wm, err2 := strconv.ParseInt(v, 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("watermark field %q=%q of Redis partition %d", f, v, rp)
			}
			out[rp][int32(kp)] = wm
		}
	}
	return out
}
