package cli

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"
)

func TestIntRanges(t *testing.T) {
	for in, want := range map[string]string{"": "[]", "0-3": "[0 1 2 3]", "1,5-6,1": "[1 5 6]", " 9 ": "[9]"} {
		got, err := ParseIntRanges(in)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("ParseIntRanges(%q) = %v %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"3-1", "x", "-1", "1,,2"} {
		if _, err := ParseIntRanges(bad); err == nil {
			t.Errorf("ParseIntRanges(%q) accepted", bad)
		}
	}
}

func TestDurationMap(t *testing.T) {
	got, err := ParseDurationMap(" orders=24h, other=1m ,")
	if err != nil || len(got) != 2 || got["orders"] != 24*time.Hour || got["other"] != time.Minute {
		t.Fatalf("ParseDurationMap = %v, %v", got, err)
	}
	for _, bad := range []string{"orders", "=1h", "orders=soon", "orders=-1h"} {
		if _, err := ParseDurationMap(bad); err == nil {
			t.Errorf("ParseDurationMap(%q) accepted", bad)
		}
	}
}

// config is a part's Config in miniature: a nested struct, an embedded
// one, a function and a field without a flag.
type config struct {
	Timeout time.Duration
	Topics  []string
	Serve   []int
	Retain  map[string]time.Duration
	Strict  bool
	Kafka   struct{ Brokers ListFlag }
	Embedded
	Now    func() time.Time
	NoFlag int
}

type Embedded struct{ Stage string }

func (c *config) register(fs *flag.FlagSet) {
	DurationVar(fs, &c.Timeout, "timeout", c.Timeout, "")
	StringsVar(fs, &c.Topics, "topics", c.Topics, "")
	IntRangesVar(fs, &c.Serve, "partitions", c.Serve, "")
	DurationMapVar(fs, &c.Retain, "retain", c.Retain, "")
	fs.BoolVar(&c.Strict, "strict", c.Strict, "")
	fs.StringVar(&c.Stage, "stage", c.Stage, "")
	KeepValues(fs, &c.Kafka, func() {
		c.Kafka.Brokers = ListFlag{"theirs:9092"}
		fs.Var(&c.Kafka.Brokers, "kafka-brokers", "")
	})
}

func TestFlagsBoundToAConfig(t *testing.T) {
	c := config{Timeout: 5 * time.Second, Topics: []string{"jobs"}, Strict: true, Embedded: Embedded{Stage: "dev"}}
	c.Kafka.Brokers = ListFlag{"ours:9092"}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.register(fs)
	// The Config's values are the defaults, KeepValues' too.
	want := map[string]string{"timeout": "5s", "topics": "jobs", "partitions": "", "retain": "", "strict": "true", "stage": "dev", "kafka-brokers": "ours:9092"}
	fs.VisitAll(func(f *flag.Flag) {
		if f.DefValue != want[f.Name] || f.Value.String() != want[f.Name] {
			t.Errorf("--%s: default %q, value %q, want %q", f.Name, f.DefValue, f.Value.String(), want[f.Name])
		}
	})
	fields := FlagFields(fs, &c)
	wantFields := map[string]string{"timeout": "Timeout", "topics": "Topics", "partitions": "Serve", "retain": "Retain", "strict": "Strict", "stage": "Stage", "kafka-brokers": "Kafka.Brokers"}
	for name, field := range wantFields {
		if !slices.Equal(fields[name], []string{field}) {
			t.Errorf("--%s sets %v, want %s", name, fields[name], field)
		}
	}
	if len(fields) != len(wantFields) {
		t.Errorf("FlagFields = %v", fields)
	}
	// Probing leaves the Config as it was.
	if c.Timeout != 5*time.Second || c.Stage != "dev" || !c.Strict || c.Serve != nil || c.Kafka.Brokers.String() != "ours:9092" {
		t.Errorf("FlagFields changed the config: %+v", c)
	}
	if err := fs.Parse([]string{"--partitions", "0-2", "--retain", "a=1h", "--topics", "a,b", "--timeout", "1s"}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(c.Serve) != "[0 1 2]" || c.Retain["a"] != time.Hour || fmt.Sprint(c.Topics) != "[a b]" || c.Timeout != time.Second {
		t.Errorf("parsed %+v", c)
	}
	got := ConfigFields(&c)
	if !slices.Equal(got, []string{"Timeout", "Topics", "Serve", "Retain", "Strict", "Kafka.Brokers", "Stage", "Now", "NoFlag"}) {
		t.Errorf("ConfigFields = %v", got)
	}
}
