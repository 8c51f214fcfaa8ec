package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/callback"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/wire"
)

// The shared test vectors under sdk/testdata are the one contract of the
// Go, Python and TypeScript clients: each client's tests read the same
// files, so a change to the envelope, the retry rules or the callback
// signature breaks all three at once (docs/sdk.md).

func readVectors(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "sdk", "testdata", name))
	if err != nil {
		t.Fatalf("the shared test vectors: %v", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("sdk/testdata/%s: %v", name, err)
	}
}

// vectorOptions turns the vectors' language-neutral options into the Go
// client's.
func vectorOptions(t *testing.T, o map[string]json.RawMessage) []client.Option {
	t.Helper()
	var opts []client.Option
	str := func(k string) string {
		var s string
		if err := json.Unmarshal(o[k], &s); err != nil {
			t.Fatalf("option %s: %v", k, err)
		}
		return s
	}
	num := func(k string) int {
		n, err := strconv.Atoi(string(o[k]))
		if err != nil {
			t.Fatalf("option %s: %v", k, err)
		}
		return n
	}
	for k := range o {
		switch k {
		case "id":
			opts = append(opts, client.ID(str(k)))
		case "group":
			opts = append(opts, client.Group(str(k)))
		case "tenant":
			opts = append(opts, client.Tenant(str(k)))
		case "resource":
			opts = append(opts, client.Resource(str(k)))
		case "priority":
			opts = append(opts, client.Priority(num(k)))
		case "run_at":
			at, err := time.Parse(time.RFC3339Nano, str(k))
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, client.RunAt(at))
		case "max_attempts":
			opts = append(opts, client.MaxAttempts(num(k)))
		case "timeout_ms":
			opts = append(opts, client.Timeout(time.Duration(num(k))*time.Millisecond))
		case "idempotency_key":
			opts = append(opts, client.IdempotencyKey(str(k)))
		case "retain_ms":
			opts = append(opts, client.Retain(time.Duration(num(k))*time.Millisecond))
		case "callback":
			opts = append(opts, client.Callback(str(k)))
		default:
			t.Fatalf("an option the Go test does not know: %s (add it here and to both SDKs)", k)
		}
	}
	return opts
}

// capture is a gate that answers from a script and keeps what it was sent.
type capture struct {
	mu      sync.Mutex
	bodies  [][]byte
	answers []vectorAnswer
}

type vectorAnswer struct {
	Status   int               `json:"status"`
	Headers  map[string]string `json:"headers"`
	Body     json.RawMessage   `json:"body"`
	BodyText string            `json:"body_text"`
}

func (c *capture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	n := len(c.bodies)
	c.bodies = append(c.bodies, b)
	c.mu.Unlock()
	if n >= len(c.answers) {
		http.Error(w, "the vector has no answer for request "+strconv.Itoa(n+1), http.StatusTeapot)
		return
	}
	a := c.answers[n]
	for k, v := range a.Headers {
		w.Header().Set(k, v)
	}
	if a.BodyText != "" {
		w.WriteHeader(a.Status)
		io.WriteString(w, a.BodyText)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.Status)
	w.Write(a.Body)
}

func vectorClient(t *testing.T, h http.Handler, maxAttempts int) *client.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := client.New(client.Config{URL: srv.URL, Retry: client.RetryPolicy{MaxAttempts: maxAttempts, MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var ulidPattern = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{26}$`)

// TestSDKVectorsEnvelopes: the Go client sends each vector's envelope, the
// payload byte for byte.
func TestSDKVectorsEnvelopes(t *testing.T) {
	var v struct {
		Cases []struct {
			Name         string                     `json:"name"`
			Type         string                     `json:"type"`
			Payload      json.RawMessage            `json:"payload"`
			PayloadRaw   *string                    `json:"payload_raw"`
			Options      map[string]json.RawMessage `json:"options"`
			GeneratedID  bool                       `json:"generated_id"`
			Envelope     map[string]any             `json:"envelope"`
			PayloadBytes *string                    `json:"payload_bytes"`
		} `json:"cases"`
		Groups []struct {
			Name      string                     `json:"name"`
			Type      string                     `json:"type"`
			Items     []json.RawMessage          `json:"items"`
			Options   map[string]json.RawMessage `json:"options"`
			Fields    map[string]any             `json:"fields"`
			ItemLines []string                   `json:"item_lines"`
		} `json:"groups"`
	}
	readVectors(t, "envelopes.json", &v)
	if len(v.Cases) == 0 || len(v.Groups) == 0 {
		t.Fatal("no envelope vectors")
	}
	for _, tc := range v.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			g := &capture{answers: []vectorAnswer{{Status: 202, Body: json.RawMessage(`{"id":"x","topic":"jobs","partition":0,"offset":0}`)}}}
			c := vectorClient(t, g, 1)
			// The payload as a Go program would give it: a value decoded
			// from the vector (maps encode with sorted keys, as the
			// vectors' are), or raw bytes.
			var payload any
			switch {
			case tc.PayloadRaw != nil:
				payload = json.RawMessage(*tc.PayloadRaw)
			case len(tc.Payload) > 0 && string(tc.Payload) != "null":
				if err := json.Unmarshal(tc.Payload, &payload); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Enqueue(context.Background(), "jobs", tc.Type, payload, vectorOptions(t, tc.Options)...); err != nil {
				t.Fatal(err)
			}
			body := g.bodies[0]
			var got map[string]any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("the body is not JSON: %v\n%s", err, body)
			}
			if tc.GeneratedID {
				id, _ := got["id"].(string)
				if !ulidPattern.MatchString(id) {
					t.Fatalf("id %q: want a ULID the client assigned", id)
				}
				delete(got, "id")
			}
			if !reflect.DeepEqual(got, tc.Envelope) {
				t.Fatalf("envelope:\n got %s\nwant %v", body, tc.Envelope)
			}
			if tc.PayloadBytes != nil && !bytes.Contains(body, []byte(`"payload":`+*tc.PayloadBytes)) {
				t.Fatalf("the payload is not byte for byte %s in\n%s", *tc.PayloadBytes, body)
			}
		})
	}
	for _, tc := range v.Groups {
		t.Run(tc.Name, func(t *testing.T) {
			g := &capture{answers: []vectorAnswer{{Status: 202, Body: json.RawMessage(`{"group":"x","topic":"jobs","count":0}`)}}}
			c := vectorClient(t, g, 1)
			items := make([]any, len(tc.Items))
			for i, it := range tc.Items {
				if err := json.Unmarshal(it, &items[i]); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.EnqueueGroup(context.Background(), "jobs", tc.Type, items, vectorOptions(t, tc.Options)...); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(string(g.bodies[0]), "\n"), "\n")
			var fields map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &fields); err != nil || !reflect.DeepEqual(fields, tc.Fields) {
				t.Fatalf("the group's fields line %s (%v): want %v", lines[0], err, tc.Fields)
			}
			if !reflect.DeepEqual(lines[1:], tc.ItemLines) {
				t.Fatalf("item lines %q, want %q", lines[1:], tc.ItemLines)
			}
		})
	}
}

// TestSDKVectorsGateAnswers: the Go client's retry rules on the vectors'
// scripted answers.
func TestSDKVectorsGateAnswers(t *testing.T) {
	var v struct {
		Cases []struct {
			Name  string `json:"name"`
			Call  string `json:"call"`
			Retry struct {
				MaxAttempts int `json:"max_attempts"`
			} `json:"retry"`
			Answers []vectorAnswer `json:"answers"`
			Expect  struct {
				Sends    int            `json:"sends"`
				SameBody bool           `json:"same_body"`
				Result   map[string]any `json:"result"`
				State    string         `json:"state"`
				Error    *struct {
					Status  int      `json:"status"`
					Message string   `json:"message"`
					Field   string   `json:"field"`
					IDs     []string `json:"ids"`
				} `json:"error"`
				Batch *struct {
					Accepted   int     `json:"accepted"`
					Rejected   int     `json:"rejected"`
					Sent       [][]int `json:"sent"`
					ItemErrors map[string]struct {
						Status int    `json:"status"`
						Field  string `json:"field"`
					} `json:"item_errors"`
				} `json:"batch"`
			} `json:"expect"`
		} `json:"cases"`
	}
	readVectors(t, "answers.json", &v)
	for _, tc := range v.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			g := &capture{answers: tc.Answers}
			max := tc.Retry.MaxAttempts
			if max == 0 {
				max = 10
			}
			c := vectorClient(t, g, max)
			ctx := context.Background()
			var res any
			var err error
			var batchIDs []string
			switch tc.Call {
			case "enqueue":
				res, err = c.Enqueue(ctx, "jobs", "hello", map[string]int{"n": 1})
			case "batch":
				var br *client.BatchResult
				br, err = c.EnqueueBatch(ctx, "jobs", []client.Job{{Type: "a"}, {Type: "b"}, {Type: "c"}})
				res = br
				var first []struct{ ID string }
				json.Unmarshal(g.bodies[0], &first)
				for _, j := range first {
					batchIDs = append(batchIDs, j.ID)
				}
			case "group":
				res, err = c.EnqueueGroup(ctx, "jobs", "thumb", []any{1, 2}, client.ID("grp-9"))
			case "lookup":
				res, err = c.LookupJob(ctx, "jobs", "X")
			case "group_status":
				res, err = c.GroupStatus(ctx, "jobs", "grp-1")
			default:
				t.Fatalf("a call the Go test does not know: %s", tc.Call)
			}
			e := tc.Expect
			if len(g.bodies) != e.Sends {
				t.Fatalf("%d sends, want %d (err %v)", len(g.bodies), e.Sends, err)
			}
			if e.SameBody {
				for i, b := range g.bodies {
					if !bytes.Equal(b, g.bodies[0]) {
						t.Fatalf("send %d's body differs from the first's:\n%s\n%s", i+1, b, g.bodies[0])
					}
				}
			}
			if e.Error != nil {
				var ge *client.Error
				if !errors.As(err, &ge) {
					t.Fatalf("error %v (%T), want a *client.Error", err, err)
				}
				if ge.Status != e.Error.Status || ge.Message != e.Error.Message || ge.Field != e.Error.Field || !reflect.DeepEqual(ge.IDs, e.Error.IDs) {
					t.Fatalf("error %+v, want %+v", ge, e.Error)
				}
				return
			}
			if e.Batch != nil {
				br := res.(*client.BatchResult)
				var be *client.BatchError
				if e.Batch.Rejected > 0 && !errors.As(err, &be) {
					t.Fatalf("error %v, want a *client.BatchError", err)
				}
				if e.Batch.Rejected == 0 && err != nil {
					t.Fatal(err)
				}
				if br.Accepted != e.Batch.Accepted || br.Rejected != e.Batch.Rejected {
					t.Fatalf("accepted %d rejected %d, want %d and %d", br.Accepted, br.Rejected, e.Batch.Accepted, e.Batch.Rejected)
				}
				for i, want := range e.Batch.Sent {
					var sent []struct{ ID string }
					json.Unmarshal(g.bodies[i], &sent)
					var got []int
					for _, j := range sent {
						got = append(got, indexOf(batchIDs, j.ID))
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("send %d carried jobs %v, want %v", i+1, got, want)
					}
				}
				for _, r := range br.Results {
					want, bad := e.Batch.ItemErrors[strconv.Itoa(r.Index)]
					switch {
					case bad && (r.Err == nil || r.Err.Status != want.Status || r.Err.Field != want.Field):
						t.Fatalf("item %d: %+v, want an error %+v", r.Index, r, want)
					case !bad && r.Err != nil:
						t.Fatalf("item %d: %v, want accepted", r.Index, r.Err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]any{}
			b, _ := json.Marshal(res)
			json.Unmarshal(b, &got)
			if e.State != "" && got["state"] != e.State {
				t.Fatalf("state %v, want %s", got["state"], e.State)
			}
			for k, want := range e.Result {
				if !reflect.DeepEqual(got[k], want) {
					t.Fatalf("result %s = %v, want %v (%s)", k, got[k], want, b)
				}
			}
		})
	}
}

func indexOf(ids []string, id string) int {
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return -1
}

// TestSDKVectorsSignatures: the vectors' signatures are the coordinator's
// (callback.Sign makes them), and the Go client's verification
// (callback.Verify, behind client.VerifyCallback) decides each as the
// vectors say.
func TestSDKVectorsSignatures(t *testing.T) {
	var v struct {
		Cases []struct {
			Name    string   `json:"name"`
			Secrets []string `json:"secrets"`
			Header  string   `json:"header"`
			Group   string   `json:"group"`
			Attempt string   `json:"attempt"`
			Body    string   `json:"body"`
			Now     int64    `json:"now"`
			V2Only  bool     `json:"v2_only"`
			Expect  string   `json:"expect"`
			Sign    *struct {
				Secrets []string `json:"secrets"`
				V1      bool     `json:"v1"`
			} `json:"sign"`
		} `json:"cases"`
	}
	readVectors(t, "signatures.json", &v)
	want := map[string]error{
		"ok": nil, "bad": client.ErrBadSignature, "stale": client.ErrStale, "no_signature": client.ErrNoSignature,
		"no_v2": client.ErrNoV2, "short_secret": client.ErrShortSecret,
	}
	keys := func(ss []string) [][]byte {
		out := make([][]byte, len(ss))
		for i, s := range ss {
			out[i] = []byte(s)
		}
		return out
	}
	for _, tc := range v.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			w, known := want[tc.Expect]
			if !known {
				t.Fatalf("an expectation the Go test does not know: %s", tc.Expect)
			}
			signed := callback.Signed{Group: tc.Group, Attempt: tc.Attempt}
			err := callback.Verify(tc.Header, []byte(tc.Body), signed, keys(tc.Secrets), time.Unix(tc.Now, 0), callback.VerifyOptions{V2Only: tc.V2Only})
			if !errors.Is(err, w) || (w == nil) != (err == nil) {
				t.Fatalf("Verify: %v, want %v", err, w)
			}
			if tc.Sign != nil {
				ts, _, _ := strings.Cut(strings.TrimPrefix(tc.Header, "t="), ",")
				sec, _ := strconv.ParseInt(ts, 10, 64)
				h, err := callback.Sign(keys(tc.Sign.Secrets), time.Unix(sec, 0), signed, tc.Sign.V1, func() io.Reader { return strings.NewReader(tc.Body) })
				if err != nil || h != tc.Header {
					t.Fatalf("the coordinator signs %q (%v), the vector says %q", h, err, tc.Header)
				}
			}
		})
	}
}

// TestSDKVectorsAdminAnswers: every 200 answer of sdk/testdata/admin.json
// (the SDKs' admin clients' vectors) is what the console sends: decoded
// into the Go type the console encodes it from, and encoded again, it is
// the same JSON, no field missing, none added, none renamed.
func TestSDKVectorsAdminAnswers(t *testing.T) {
	var v struct {
		Cases []struct {
			Name    string         `json:"name"`
			GoType  string         `json:"go_type"`
			Answers []vectorAnswer `json:"answers"`
		} `json:"cases"`
	}
	readVectors(t, "admin.json", &v)
	types := map[string]func() any{
		"JobView":        func() any { return new(wire.JobView) },
		"JobPage":        func() any { return new(queue.JobPage) },
		"JobChange":      func() any { return new(queue.JobChange) },
		"GroupStatus":    func() any { return new(wire.GroupStatus) },
		"GroupCancelled": func() any { return new(wire.GroupCancelled) },
		"TopicCreated":   func() any { return new(admin.TopicCreated) },
		"TopicList":      func() any { return new(admin.TopicList) },
		"TopicState":     func() any { return new(admin.TopicState) },
		"TopicDeleted":   func() any { return new(admin.TopicDeleted) },
	}
	checked := 0
	for _, tc := range v.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			for i, a := range tc.Answers {
				if a.Status != http.StatusOK {
					continue
				}
				mk, ok := types[tc.GoType]
				if !ok {
					t.Fatalf("answer %d: go_type %q: want one of the types this test knows (add it here)", i, tc.GoType)
				}
				val := mk()
				if err := json.Unmarshal(a.Body, val); err != nil {
					t.Fatalf("answer %d does not decode into %s: %v", i, tc.GoType, err)
				}
				again, err := json.Marshal(val)
				if err != nil {
					t.Fatal(err)
				}
				var want, got any
				json.Unmarshal(a.Body, &want)
				json.Unmarshal(again, &got)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("answer %d is not what the console sends as %s:\n  vector %s\n  Go     %s", i, tc.GoType, a.Body, again)
				}
				checked++
			}
		})
	}
	if checked == 0 {
		t.Fatal("no admin answer checked")
	}
}
