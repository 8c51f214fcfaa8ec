package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The alerting rules and the dashboard in deploy/ name only metrics that a
// running pipeline exports: every sluice_* name in their expressions is
// scraped from the /metrics of sluice dev's gate, relay, worker and
// coordinator after a little traffic, and both files are shaped as
// Prometheus and Grafana expect.
func TestDeployFilesNameExportedMetrics(t *testing.T) {
	used := map[string][]string{} // metric name -> where the files use it
	addExpr := func(where, expr string) {
		t.Helper()
		names := metricNameRE.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: expression names no sluice_ metric: %s", where, expr)
		}
		for _, n := range names {
			if !slices.Contains(used[n], where) {
				used[n] = append(used[n], where)
			}
		}
	}
	for where, expr := range checkAlertRules(t, filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml")) {
		addExpr(where, expr)
	}
	for where, expr := range checkDashboard(t, filepath.Join("..", "..", "deploy", "grafana", "sluice.json")) {
		addExpr(where, expr)
	}
	if t.Failed() {
		return
	}

	cfg := devOnFreePorts(t, filepath.Join(t.TempDir(), ".sluice"))
	cfg.RedisPartitions, cfg.Partitions = 2, 2 // fewer series, same families
	startDev(t, &cfg)
	endpoints := []string{cfg.GateAddr, cfg.RelayAddr, cfg.WorkerAddr, cfg.CoordinatorAddr}

	// The worker's rate-limit histograms have a child per limited resource
	// once a job of it starts: put a limit generous enough to throttle
	// nothing, and wait until the worker follows it.
	consul := devConsul(t, cfg)
	if _, err := consul.KV().Put(&consulapi.KVPair{Key: "sluice/dev/limits/deploy-test", Value: []byte(`{"rate": 1000}`)}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the dev worker to read the limit", func() bool {
		return scrapeMetrics(cfg.WorkerAddr)[`sluice_worker_rate_limit_per_second`]
	})
	// The periodic scheduler's series exist once a schedule does: one
	// every second through the dev gate (its jobs are the little traffic
	// too).
	if _, err := consul.KV().Put(&consulapi.KVPair{Key: "sluice/dev/periodic/deploy-test", Value: []byte(`{"every":"1s","topic":"` + cfg.Topic + `","type":"x"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the dev coordinator to fire the schedule", func() bool {
		return scrapeMetrics(cfg.CoordinatorAddr)[`sluice_coordinator_periodic_fires_total`]
	})
	for _, body := range []string{
		`{"type":"x","payload":{}}`,
		`{"type":"x","resource":"deploy-test","payload":{"n":1}}`,
	} {
		resp, err := http.Post("http://"+cfg.GateAddr+"/v1/topics/"+cfg.Topic+"/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %s: %s %s", body, resp.Status, answer)
		}
	}

	// Label vectors show only once observed: the jobs above run through
	// every part, the coordinator reads every partition each scaling cycle
	// (5 s in dev) and sends canaries every interval (10 s in dev, the
	// first at once). Poll until every name shows or the deadline passes.
	missing := func() []string {
		var exposed []map[string]bool
		for _, addr := range endpoints {
			exposed = append(exposed, scrapeMetrics(addr))
		}
		var out []string
		for name := range used {
			if !slices.ContainsFunc(exposed, func(samples map[string]bool) bool { return samples[name] }) {
				out = append(out, name)
			}
		}
		sort.Strings(out)
		return out
	}
	var gone []string
	for deadline, wait := time.Now().Add(25*time.Second), 50*time.Millisecond; ; wait = min(2*wait, time.Second) {
		if gone = missing(); len(gone) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(wait)
	}
	if len(gone) > 0 {
		var msg strings.Builder
		for _, name := range gone {
			fmt.Fprintf(&msg, "\n  %s, used in %s", familyOf(name), strings.Join(used[name], "; "))
		}
		t.Errorf("%d of the %d metric names in deploy/ are exported by none of the gate, relay, worker and coordinator of a running sluice dev:%s",
			len(gone), len(used), msg.String())
	}
}

var (
	metricNameRE  = regexp.MustCompile(`sluice_[a-z0-9_]+`)
	promDuration  = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)
	grafanaVarRE  = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)
	labelValuesRE = regexp.MustCompile(`^label_values\((sluice_[a-z0-9_]+)(\{[^}]*\})?, *[a-z_]+\)$`)
)

// familyOf is the metric family of a sample name, for messages: a
// histogram's _bucket, _sum and _count samples belong to the histogram.
func familyOf(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(name, suffix); ok {
			return f + " (" + name + ")"
		}
	}
	return name
}

// scrapeMetrics returns the sample names in the Prometheus text exposition
// at addr/metrics (a histogram's with their _bucket, _sum and _count); an
// endpoint that does not answer exposes nothing.
func scrapeMetrics(addr string) map[string]bool {
	samples := map[string]bool{}
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return samples
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return samples
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' { // HELP, TYPE
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			samples[line[:i]] = true
		}
	}
	return samples
}

// checkAlertRules checks the shape of a Prometheus rule file of alerts (one
// group, "sluice"; every rule with alert, expr, for, a severity, a summary
// and a description) and returns its expressions by alert.
func checkAlertRules(t *testing.T, path string) map[string]string {
	t.Helper()
	type rule struct {
		Alert         string            `yaml:"alert"`
		Expr          string            `yaml:"expr"`
		For           string            `yaml:"for"`
		KeepFiringFor string            `yaml:"keep_firing_for"`
		Labels        map[string]string `yaml:"labels"`
		Annotations   map[string]string `yaml:"annotations"`
	}
	var file struct {
		Groups []struct {
			Name     string `yaml:"name"`
			Interval string `yaml:"interval"`
			Rules    []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true) // a misspelt key is an error, not an ignored field
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(file.Groups) != 1 || file.Groups[0].Name != "sluice" {
		t.Fatalf("%s: want one rule group named sluice", path)
	}
	exprs := map[string]string{}
	for i, r := range file.Groups[0].Rules {
		where := fmt.Sprintf("alerts.yml rule %d %s", i, r.Alert)
		if r.Alert == "" {
			t.Errorf("%s: no alert name", where)
		}
		if strings.TrimSpace(r.Expr) == "" {
			t.Errorf("%s: no expr", where)
		}
		if !promDuration.MatchString(r.For) {
			t.Errorf("%s: for %q is not a Prometheus duration", where, r.For)
		}
		if r.KeepFiringFor != "" && !promDuration.MatchString(r.KeepFiringFor) {
			t.Errorf("%s: keep_firing_for %q is not a Prometheus duration", where, r.KeepFiringFor)
		}
		if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
			t.Errorf("%s: severity %q, want critical, warning or info", where, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no %s annotation", where, a)
			}
		}
		if _, dup := exprs["alerts.yml "+r.Alert]; dup {
			t.Errorf("%s: alert name used twice", where)
		}
		exprs["alerts.yml "+r.Alert] = r.Expr
	}
	if len(exprs) == 0 {
		t.Errorf("%s: no rules", path)
	}
	return exprs
}

// checkDashboard checks the shape of a Grafana dashboard (a datasource
// variable; topic and partition variables from label_values; every panel
// titled, on the datasource variable, with targets) and returns every
// expression in it, panels' and variables', by where it is.
func checkDashboard(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title         string `json:"title"`
		UID           string `json:"uid"`
		SchemaVersion int    `json:"schemaVersion"`
		Templating    struct {
			List []struct {
				Type       string `json:"type"`
				Name       string `json:"name"`
				Query      any    `json:"query"` // a string, or {"query": ...} in newer Grafana
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []map[string]any `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if dash.Title == "" || dash.UID == "" || dash.SchemaVersion < 36 {
		t.Errorf("%s: title %q, uid %q, schemaVersion %d: want a title, a uid and schemaVersion 36 or later", path, dash.Title, dash.UID, dash.SchemaVersion)
	}
	exprs := map[string]string{}
	vars := map[string]string{} // name -> type
	dsVar := ""
	for _, v := range dash.Templating.List {
		vars[v.Name] = v.Type
		switch v.Type {
		case "datasource":
			if v.Query != "prometheus" {
				t.Errorf("%s: datasource variable %s is of type %v, want prometheus", path, v.Name, v.Query)
			}
			dsVar = v.Name
		case "query":
			q, _ := v.Query.(string)
			if m, ok := v.Query.(map[string]any); ok {
				q, _ = m["query"].(string)
			}
			if !labelValuesRE.MatchString(q) {
				t.Errorf("%s: variable %s: query %q, want label_values(sluice_<metric>, <label>)", path, v.Name, q)
			}
			exprs["sluice.json variable "+v.Name] = q
		}
	}
	if dsVar == "" {
		t.Fatalf("%s: no datasource variable", path)
	}
	for _, name := range []string{"topic", "partition"} {
		if vars[name] != "query" {
			t.Errorf("%s: no query variable %s", path, name)
		}
	}
	onVar := func(ds any) bool {
		m, ok := ds.(map[string]any)
		return ok && (m["uid"] == "${"+dsVar+"}" || m["uid"] == "$"+dsVar)
	}
	ids := map[float64]bool{}
	var walk func([]map[string]any)
	walk = func(panels []map[string]any) {
		for _, p := range panels {
			title, _ := p["title"].(string)
			id, _ := p["id"].(float64)
			if ids[id] {
				t.Errorf("%s: panel %q: id %v used twice", path, title, id)
			}
			ids[id] = true
			if p["type"] == "row" { // a collapsed row holds its panels
				var inner []map[string]any
				raw, _ := json.Marshal(p["panels"])
				json.Unmarshal(raw, &inner)
				walk(inner)
				continue
			}
			where := fmt.Sprintf("sluice.json panel %q", title)
			if title == "" {
				t.Errorf("%s: panel %v has no title", path, id)
			}
			if !onVar(p["datasource"]) {
				t.Errorf("%s: datasource %v, want the variable ${%s}", where, p["datasource"], dsVar)
			}
			targets, _ := p["targets"].([]any)
			if len(targets) == 0 {
				t.Errorf("%s: no targets", where)
			}
			for _, tg := range targets {
				m, _ := tg.(map[string]any)
				expr, _ := m["expr"].(string)
				ref, _ := m["refId"].(string)
				if strings.TrimSpace(expr) == "" || ref == "" {
					t.Errorf("%s: a target without expr or refId: %v", where, tg)
					continue
				}
				if ds, ok := m["datasource"]; ok && !onVar(ds) {
					t.Errorf("%s: target %s: datasource %v, want the variable ${%s}", where, ref, ds, dsVar)
				}
				for _, v := range grafanaVarRE.FindAllStringSubmatch(expr, -1) {
					if _, ok := vars[v[1]]; !ok && !strings.HasPrefix(v[1], "__") {
						t.Errorf("%s: target %s uses the undefined variable $%s", where, ref, v[1])
					}
				}
				exprs[where+" target "+ref] = expr
			}
		}
	}
	walk(dash.Panels)
	if len(ids) == 0 {
		t.Errorf("%s: no panels", path)
	}
	return exprs
}
