package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/periodic"
	"github.com/sluicehq/sluice/internal/testenv"
)

func consolePolicy(t *testing.T) string {
	t.Helper()
	rules, err := consul.PolicyFor(consul.Policy{Part: "console", Stage: "test", Topics: []string{"jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// TestConsoleUnderItsLeastACLPolicy: with Consul denying by default and a
// token of exactly `sluice consul-policy --topics jobs console`, the admin
// API reads and writes what it keeps in Consul: rates, limits, scale pins
// and the scaling parameters. A rate of a topic outside the policy is
// refused with a 503 whose text names the key, the part and the token's
// flag.
func TestConsoleUnderItsLeastACLPolicy(t *testing.T) {
	b := newBed(t, 2)
	b.consul = testenv.Consul(t, testenv.WithConsulACL()) // instead of the open one
	token := b.consul.ACLToken("console", consolePolicy(t))
	c := b.start(t, "c1", func(cfg *console.Config) { cfg.ConsulToken = cli.Secret{Value: token} })

	var rate admin.RateState
	c.must(t, "PUT", "/api/v1/rates/jobs", admin.RateSet{Rate: 50}, &rate)
	c.must(t, "POST", "/api/v1/rates/jobs/pause", nil, &rate)
	c.must(t, "GET", "/api/v1/rates/jobs", nil, &rate)
	if !rate.Paused {
		t.Errorf("rate %+v, want paused", rate)
	}
	var rates admin.RateList
	c.must(t, "GET", "/api/v1/rates", nil, &rates)
	if len(rates.Rates) != 1 {
		t.Errorf("rates %+v", rates)
	}
	var lim admin.LimitState
	c.must(t, "PUT", "/api/v1/limits/smtp", admin.LimitState{Rate: 10, Burst: 2}, &lim)
	var limits admin.LimitList
	c.must(t, "GET", "/api/v1/limits", nil, &limits)
	c.must(t, "DELETE", "/api/v1/limits/smtp", nil, nil)
	var sp admin.ScalePartition
	c.must(t, "PUT", "/api/v1/scale/0", admin.ScaleSet{Workers: 3}, &sp)
	var scale admin.ScaleList
	c.must(t, "GET", "/api/v1/scale", nil, &scale)
	if scale.ParamsFrom != admin.ParamsFromConsul || len(scale.Partitions) != 2 || scale.Partitions[0].Pin == nil {
		t.Errorf("scale %+v", scale)
	}
	c.must(t, "PUT", "/api/v1/scale/0", admin.ScaleSet{Auto: true}, &sp)
	var ps admin.PeriodicState
	c.must(t, "PUT", "/api/v1/periodic/nightly", periodic.Schedule{Cron: "0 0 3 * * *", Topic: "jobs", Type: "report"}, &ps)
	c.must(t, "POST", "/api/v1/periodic/nightly/pause", nil, &ps)
	c.must(t, "GET", "/api/v1/periodic", nil, nil)
	c.must(t, "DELETE", "/api/v1/periodic/nightly", nil, nil)

	code, body := c.call(t, "PUT", "/api/v1/rates/mail", adminToken, admin.RateSet{Rate: 5})
	if code != http.StatusServiceUnavailable {
		t.Fatalf("a rate outside the policy: %d %s", code, body)
	}
	e := apiError(t, body)
	for _, want := range []string{"console: Consul denied write of key sluice/test/relay/mail/rate", "--consul-token-file", "sluice consul-policy console"} {
		if !strings.Contains(e.Message+" "+e.Fix, want) {
			t.Errorf("the error does not name %s: %+v", want, e)
		}
	}
	if strings.Contains(string(body), token) {
		t.Error("the answer shows the Consul token")
	}
}
