package queue

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestLocationFlags(t *testing.T) {
	l := DefaultStageRedis()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	l.RegisterFlags(fs)
	for name, want := range map[string]string{"stage": "dev", "redis-addr": "127.0.0.1:6379", "redis-partitions": "8", "redis-partition-addrs": ""} {
		if f := fs.Lookup(name); f == nil || f.DefValue != want {
			t.Errorf("--%s: %+v, want default %q", name, f, want)
		}
	}
	// The partitions are checked against the count once every flag is in:
	// --redis-partitions may come after --redis-partition-addrs.
	if err := fs.Parse([]string{"--redis-partition-addrs", "3=b:2, 0=a:1", "--redis-partitions", "4", "--stage", "s"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	if pc := l.PoolConfig(); pc.Keyspace != (Keyspace{Stage: "s", Partitions: 4}) || pc.Addr != "127.0.0.1:6379" || pc.PartitionAddrs[3] != "b:2" || pc.PartitionAddrs[0] != "a:1" {
		t.Errorf("PoolConfig = %+v", pc)
	}
	if s := fs.Lookup("redis-partition-addrs").Value.String(); s != "0=a:1,3=b:2" {
		t.Errorf("--redis-partition-addrs reads back %q", s)
	}
	if err := fs.Parse([]string{"--redis-partition-addrs", "x"}); err == nil {
		t.Error("--redis-partition-addrs x accepted")
	}
	for _, c := range []struct {
		mutate func(*StageRedis)
		field  string
	}{
		{func(l *StageRedis) { l.Stage = "a:b" }, "Stage: "},
		{func(l *StageRedis) { l.Partitions = 0 }, "Partitions: "},
		{func(l *StageRedis) { l.RedisAddr = "" }, "RedisAddr: "},
		{func(l *StageRedis) { l.PartitionAddrs = map[int]string{8: "x:1"} }, "PartitionAddrs: partition 8 out of range 0..7"},
	} {
		l := DefaultStageRedis()
		c.mutate(&l)
		if err := l.Validate(); err == nil || !strings.HasPrefix(err.Error(), c.field) {
			t.Errorf("Validate() = %v, want an error starting %q", err, c.field)
		}
	}
}
