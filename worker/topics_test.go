package worker

import (
	"flag"
	"math"
	"strings"
	"testing"
)

func TestTopicsList(t *testing.T) {
	got, err := parseTopics(" critical=6, default=3,low ")
	want := TopicWeights{{"critical", 6}, {"default", 3}, {"low", 1}}
	if err != nil || len(got) != len(want) {
		t.Fatalf("parseTopics = %v, %v; want %v", got, err, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("parseTopics = %v; want %v", got, want)
		}
	}
	if s := (topicsValue{&got}).String(); s != "critical=6,default=3,low=1" {
		t.Fatalf("String() = %q", s)
	}
	if got, err := parseTopics(""); err != nil || got != nil {
		t.Fatalf("an empty list: %v, %v; want nil (the default topic)", got, err)
	}
	for _, bad := range []struct{ in, says string }{
		{"a,a", `topic "a" given twice`},
		{"a=2,b,a=1", `topic "a" given twice`},
		{"a=0", "positive integer"},
		{"a=-1", "positive integer"},
		{"a=1.5", "positive integer"},
		{"a=", "positive integer"},
		{"a b=1", `topic "a b"`},
		{"=3", `topic ""`},
		{"a{x}", `topic "a{x}"`},
	} {
		if got, err := parseTopics(bad.in); err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("parseTopics(%q) = %v, %v; want an error saying %s", bad.in, got, err, bad.says)
		}
	}
}

// As a flag, the list's errors name the flag, and a value given twice
// (environment, then command line) keeps the last, as other flags do.
func TestTopicsFlag(t *testing.T) {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	cfg := DefaultConfig()
	cfg.RegisterFlags(fs)
	if def := fs.Lookup("topics").DefValue; def != "jobs=1" {
		t.Fatalf("default shown as %q", def)
	}
	if err := fs.Parse([]string{"--topics", "a=2", "--topics", "b,c=3"}); err != nil || fs.Lookup("topics").Value.String() != "b=1,c=3" ||
		len(cfg.Topics) != 2 || cfg.Topics[1] != (TopicWeight{"c", 3}) {
		t.Fatalf("after two values: %v, %v", cfg.Topics, err)
	}
	err := fs.Parse([]string{"--topics", "b,b"})
	if err == nil || !strings.Contains(err.Error(), "-topics") || !strings.Contains(err.Error(), "given twice") {
		t.Fatalf("a duplicate: %v", err)
	}
}

// claimAll simulates a consumer's claims: each topic has backlog[name]
// jobs, each claim takes up to batch. It returns the jobs served per topic
// after total jobs, or when every topic is empty.
func claimAll(ch *topicChooser, backlog map[string]int, batch, total int) map[string]int {
	served := map[string]int{}
	for n := 0; n < total; {
		q := ch.next()
		if q == nil {
			break
		}
		k := min(batch, backlog[q.q.Topic], total-n)
		backlog[q.q.Topic] -= k
		served[q.q.Topic] += k
		n += k
		ch.claimed(q, k, false)
	}
	return served
}

func TestTopicChooserWeighsByJobsServed(t *testing.T) {
	ch := newTopicChooser(TopicWeights{{"a", 6}, {"b", 3}, {"c", 1}}, 0, false)
	got := claimAll(ch, map[string]int{"a": 1e6, "b": 1e6, "c": 1e6}, 7, 1000)
	// Fair at the grain of a claim: each within a batch of its share.
	for name, share := range map[string]float64{"a": 600, "b": 300, "c": 100} {
		if math.Abs(float64(got[name])-share) > 7 {
			t.Errorf("topic %s served %d of 1000, want %v ± 7 (6:3:1): %v", name, got[name], share, got)
		}
	}
	// A topic that runs dry is passed over; the others share its part.
	ch = newTopicChooser(TopicWeights{{"a", 1}, {"b", 1}}, 0, false)
	got = claimAll(ch, map[string]int{"a": 10, "b": 1e6}, 4, 500)
	if got["a"] != 10 || got["b"] != 490 {
		t.Fatalf("a dry topic: served %v, want a 10 (all it had) and b the rest", got)
	}
}

// A topic back from empty gets its share from then on, not a burst for
// the time it was idle: its virtual time comes up to the others'.
func TestATopicBackFromEmptyClaimsNoBurst(t *testing.T) {
	ch := newTopicChooser(TopicWeights{{"a", 1}, {"b", 1}}, 0, false)
	backlog := map[string]int{"a": 1e6, "b": 0}
	claimAll(ch, backlog, 8, 800) // a alone: b is found empty
	if !ch.queues[1].empty {
		t.Fatal("b was not marked empty")
	}
	backlog["b"] = 1e6
	ch.maybeWork(ch.queues[1]) // b has work again (a wake token, a probe)
	got := claimAll(ch, backlog, 8, 200)
	if got["b"] < 92 || got["b"] > 108 {
		t.Fatalf("after b came back: served %v in 200, want about 100 each (b must not make up for its idle time)", got)
	}
}

func TestTopicChooserStrictOrder(t *testing.T) {
	ch := newTopicChooser(TopicWeights{{"first", 1}, {"second", 100}}, 0, true)
	backlog := map[string]int{"first": 50, "second": 1e6}
	var order []string
	for range 20 {
		q := ch.next()
		k := min(8, backlog[q.q.Topic])
		backlog[q.q.Topic] -= k
		ch.claimed(q, k, false)
		if k > 0 {
			order = append(order, q.q.Topic)
		}
	}
	// 50 jobs in claims of 8: seven claims of first, then second.
	for i, name := range order {
		if want := map[bool]string{true: "first", false: "second"}[i < 7]; name != want {
			t.Fatalf("claim %d from %s, want %s (weights ignored): %v", i, name, want, order)
		}
	}
	// first has work again: it comes before second at once.
	backlog["first"] = 3
	ch.maybeWork(ch.queues[0])
	if q := ch.next(); q.q.Topic != "first" {
		t.Fatalf("next claim from %s, want first", q.q.Topic)
	}
}
