package gate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/groups"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/tracing"
)

// groupFields are a bulk group's fields: every item's job gets them
// (job.GroupFields, which the Go client sends).
type groupFields = job.GroupFields

// groupChunk is how many items go to Kafka in one produce call: large
// enough to batch, small enough that memory stays flat whatever the size.
// A chunk also goes once its records reach Config.MaxBatchBytes, so that
// large items do not pile up to groupChunk times Config.MaxBodyBytes.
const groupChunk = 1000

// groupAnswer is the answer to a bulk submission.
type groupAnswer struct {
	Group string `json:"group"`
	Topic string `json:"topic"`
	Count int64  `json:"count"`
	// Status is where GET (status) and DELETE (cancel) of the group go.
	Status string `json:"status"`
}

// serveGroup takes a bulk group: its fields, then its items, each item the
// payload of one job. The body streams through: items go to Kafka in chunks
// as they are read, so a million items never sit in memory. Two forms:
//
//	Content-Type: application/json     {"type":"email", ..., "items": [<payload>, ...]}
//	Content-Type: application/x-ndjson first line the fields, then one payload per line
//
// After the last item a close record with the total goes to the same Kafka
// partition. If the body turns out bad halfway, what was written is
// cancelled (a cancel record follows it) and the answer says so: the
// client fixes the body and submits under a new group id.
func (g *Gate) serveGroup(x *exchange) {
	topic := x.r.PathValue("topic")
	acks, partition, ok := g.admit(x, topic)
	if !ok {
		return
	}
	items, fields, err := openGroupBody(x.r, g.cfg.MaxBodyBytes)
	if err != nil {
		x.fail(http.StatusBadRequest, "%v", err)
		return
	}
	now := g.now()
	// The items' ids derive from the group's id. When the client chose it,
	// a resend of the group (after a 504, say) repeats every item's id:
	// mark them id_given so those resends are deduped.
	idGiven := fields.ID != ""
	if fields.ID == "" {
		fields.ID = job.NewID()
	}
	tmpl := job.Job{
		ID: job.BulkID(fields.ID, 0), Type: fields.Type, Group: fields.ID, Tenant: fields.Tenant, Resource: fields.Resource,
		Priority: fields.Priority, MaxAttempts: fields.MaxAttempts, Payload: json.RawMessage("null"),
	}
	if fields.Timeout != nil {
		tmpl.Timeout = *fields.Timeout
	}
	if len(fields.ID) > job.MaxBulkGroupLen {
		x.fail(http.StatusBadRequest, "field \"id\": a bulk group's id is at most %d bytes (its jobs' ids add the item's index)", job.MaxBulkGroupLen)
		return
	}
	if err := tmpl.Validate(topic, now); err != nil {
		x.failDecode(err)
		return
	}
	if err := x.reserved(fields.ID, fields.Type); err != nil {
		x.fail(http.StatusForbidden, "%v", err)
		return
	}
	if fields.CallbackURL != "" {
		err := (job.GroupClose{Group: fields.ID, CallbackURL: fields.CallbackURL}).Check()
		if err == nil {
			err = g.checkCallback(x.r.Context(), fields.CallbackURL)
		}
		if err != nil {
			x.failDecode(err)
			return
		}
	}
	tmpl.Defaults(topic, now)
	var n int64
	tmpl.IDGiven = idGiven // Defaults saw the item id the gate derived
	// Traced, the group has a span of its own, and each item a trace of its
	// own linked to it: a million items under one trace would be unreadable.
	var groupSpan trace.Span
	if tracing.Enabled() {
		_, groupSpan = startProduce(x.r, topic, tracing.AttrGroup.String(fields.ID), tracing.AttrJobType.String(fields.Type))
		defer func() { groupSpan.SetAttributes(tracing.AttrBatchJobs.Int64(n)); groupSpan.End() }()
	}
	// A big group takes longer than the server's per-request deadlines:
	// extend them as the body keeps coming.
	rc := http.NewResponseController(x.w)
	limits := g.cfg.HTTP.OrDefaults()
	batch := make([]kafka.Message, 0, groupChunk)
	var batchBytes int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_ = rc.SetReadDeadline(time.Now().Add(g.cfg.ProduceTimeout + limits.ReadTimeout))
		_ = rc.SetWriteDeadline(time.Now().Add(limits.WriteTimeout))
		results, err := g.produce(x, acks, batch)
		if err != nil {
			return err
		}
		for _, r := range results {
			if r.Err != nil {
				return r.Err
			}
		}
		g.metrics.jobs.with(topic, "accepted").Add(float64(len(batch)))
		clear(batch) // the records' bytes go now, not when the slots are reused
		batch, batchBytes = batch[:0], 0
		return nil
	}
	for {
		payload, err := items.next()
		if err == io.EOF {
			break
		}
		if err == nil && int64(len(payload)) > g.cfg.MaxBodyBytes {
			err = itemError{fmt.Errorf("item %d: %d bytes, over the limit of %d", n, len(payload), g.cfg.MaxBodyBytes)}
		}
		if err == nil && n >= int64(g.cfg.MaxGroupItems) {
			err = itemError{fmt.Errorf("more than %d items (--max-group-items)", g.cfg.MaxGroupItems)}
		}
		if err != nil {
			g.abandonGroup(x, topic, acks, partition, fields.ID, n-int64(len(batch)), err)
			return
		}
		j := tmpl
		j.ID, j.Payload = job.BulkID(fields.ID, n), payload
		if groupSpan != nil {
			j.Traceparent = itemTrace(x.r.Context(), groupSpan, topic, &j)
		}
		value := j.AppendJSON(make([]byte, 0, len(payload)+256))
		batch = append(batch, kafka.Message{Topic: topic, Key: []byte(fields.ID), Value: value, Partition: partition})
		batchBytes += int64(len(value))
		n++
		if len(batch) == groupChunk || batchBytes >= g.cfg.MaxBatchBytes {
			// A chunk whose produce failed may still land (a timeout says
			// nothing of it): its items count as written, so they are
			// cancelled too.
			if err := flush(); err != nil {
				g.abandonGroup(x, topic, acks, partition, fields.ID, n, err)
				return
			}
		}
	}
	if err := flush(); err != nil {
		g.abandonGroup(x, topic, acks, partition, fields.ID, n, err)
		return
	}
	closeMsg := controlMessage(topic, partition, job.GroupClose{Group: fields.ID, Total: n, CallbackURL: fields.CallbackURL}, job.GroupCloseControl)
	if err := g.produceOne(x, acks, closeMsg); err != nil {
		g.abandonGroup(x, topic, acks, partition, fields.ID, n, err)
		return
	}
	g.metrics.groups.WithLabelValues(topic, "accepted").Inc()
	g.log.Info("bulk group accepted", "group", fields.ID, "topic", topic, "items", n)
	x.json(http.StatusAccepted, groupAnswer{Group: fields.ID, Topic: topic, Count: n, Status: groups.Path(topic, fields.ID)})
}

// abandonGroup answers a submission that failed after written items (or
// items whose produce failed, which may land all the same): it writes a
// cancel record for them (best effort: the answer says whether it took)
// and tells the client what happened.
func (g *Gate) abandonGroup(x *exchange, topic string, acks kafka.Acks, partition int32, group string, written int64, cause error) {
	g.metrics.groups.WithLabelValues(topic, "rejected").Inc()
	status := http.StatusBadRequest
	var de *job.DecodeError
	if !errors.As(cause, &de) && !isItemError(cause) {
		status = g.produceStatus(cause)
		if errors.Is(cause, context.DeadlineExceeded) {
			status = http.StatusGatewayTimeout
		}
	}
	msg := fmt.Sprintf("%v", cause)
	if written > 0 {
		cancel := controlMessage(topic, partition, job.GroupClose{Group: group, Cancel: true}, job.GroupCloseControl)
		if err := g.produceOne(x, kafka.AcksAll, cancel); err != nil {
			msg += fmt.Sprintf("; %d items were written (or sent) and cancelling them failed (%v): DELETE %s", written, err, groups.Path(topic, group))
		} else {
			msg += fmt.Sprintf("; the %d items written (or sent) before it are cancelled: fix the cause and submit the group under a new group id", written)
		}
	}
	g.log.Warn("bulk group abandoned", "group", group, "topic", topic, "written", written, "err", cause)
	if status == http.StatusServiceUnavailable {
		g.setRetryAfter(x)
	}
	x.json(status, errorBody{Error: msg, IDs: []string{group}})
}

type itemError struct{ err error }

func (e itemError) Error() string { return e.err.Error() }
func (e itemError) Unwrap() error { return e.err }

func isItemError(err error) bool { var ie itemError; return errors.As(err, &ie) }

func (g *Gate) produceOne(x *exchange, acks kafka.Acks, m kafka.Message) error {
	results, err := g.produce(x, acks, []kafka.Message{m})
	if err != nil {
		return err
	}
	return results[0].Err
}

func controlMessage(topic string, partition int32, c job.GroupClose, kind string) kafka.Message {
	return kafka.Message{
		Topic: topic, Key: []byte(c.Group), Value: mustJSON(c), Partition: partition,
		Headers: []sarama.RecordHeader{{Key: []byte(job.ControlHeader), Value: []byte(kind)}},
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only fixed, encodable types reach here
	}
	return b
}

// itemReader yields a bulk body's items one at a time.
type itemReader interface {
	next() (json.RawMessage, error) // io.EOF after the last
}

// openGroupBody reads the group's fields and returns a reader of its items.
func openGroupBody(r *http.Request, maxItem int64) (itemReader, groupFields, error) {
	var f groupFields
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "application/x-ndjson", "application/jsonl", "application/ndjson":
		br := bufio.NewReaderSize(r.Body, 64<<10)
		lr := &ndjsonItems{r: br, max: maxItem}
		first, err := lr.line()
		if err != nil {
			if err == io.EOF {
				err = errors.New("empty body: want the group's fields on the first line")
			}
			return nil, f, err
		}
		if err := strictUnmarshal(first, &f); err != nil {
			return nil, f, fmt.Errorf("line 1, the group's fields: %v", err)
		}
		lr.lineNo = 1
		return lr, f, nil
	case "", "application/json":
		// A json.Decoder buffers a value whole before it decodes it: the
		// body is read through a bound that each field and item moves on,
		// so a huge field or item fails once past its limit instead of
		// filling memory first.
		br := &boundedReader{r: r.Body, limit: maxItem + boundSlack}
		dec := json.NewDecoder(br)
		dec.UseNumber()
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			if errors.Is(err, errOverBound) {
				return nil, f, fmt.Errorf("the group's fields (everything before \"items\") are over the limit of %d bytes (--max-body-bytes)", maxItem)
			}
			return nil, f, errors.New(`want a JSON object {"type": ..., "items": [...]} (or Content-Type: application/x-ndjson)`)
		}
		raw := map[string]json.RawMessage{}
		for dec.More() {
			t, err := dec.Token()
			if errors.Is(err, errOverBound) {
				return nil, f, fmt.Errorf("the group's fields (everything before \"items\") are over the limit of %d bytes (--max-body-bytes)", maxItem)
			}
			if err != nil {
				return nil, f, fmt.Errorf("reading the group's fields: %v", err)
			}
			name, _ := t.(string)
			if name == "items" {
				b, _ := json.Marshal(raw)
				if err := strictUnmarshal(b, &f); err != nil {
					return nil, f, fmt.Errorf("the group's fields: %v", err)
				}
				if t, err := dec.Token(); err != nil || t != json.Delim('[') {
					return nil, f, errors.New(`"items" must be an array`)
				}
				return &jsonItems{dec: dec, bound: br, max: maxItem}, f, nil
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				if errors.Is(err, errOverBound) {
					return nil, f, fmt.Errorf("field %q: the group's fields (everything before \"items\") are over the limit of %d bytes (--max-body-bytes)", name, maxItem)
				}
				return nil, f, fmt.Errorf("field %q: %v", name, err)
			}
			raw[name] = v
		}
		return nil, f, errors.New(`no "items": put the items array last, after the group's fields`)
	}
	return nil, f, fmt.Errorf("Content-Type %q: want application/json or application/x-ndjson", mt)
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// boundSlack is what a bounded read allows beyond an item's limit: the
// separators and whitespace around it, and the byte after a number that
// tells where it ends.
const boundSlack = 4 << 10

// errOverBound is boundedReader's error once its bound is reached.
var errOverBound = errors.New("over the limit")

// boundedReader reads r until limit bytes were read in all, then fails
// with errOverBound: the JSON form of a bulk group moves limit on before
// each item, so the decoder above it never holds more than one item's
// limit of the body.
type boundedReader struct {
	r     io.Reader
	read  int64
	limit int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.read >= b.limit {
		return 0, errOverBound
	}
	if left := b.limit - b.read; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := b.r.Read(p)
	b.read += int64(n)
	return n, err
}

type jsonItems struct {
	dec   *json.Decoder
	bound *boundedReader
	max   int64
	n     int
	done  bool
}

func (j *jsonItems) next() (json.RawMessage, error) {
	if j.done {
		return nil, io.EOF
	}
	// From where the decoder stands, the next item (and what separates it
	// from the last) may take its limit and no more.
	j.bound.limit = j.dec.InputOffset() + j.max + boundSlack
	if !j.dec.More() {
		// The array's end, then the object's: nothing may follow "items".
		if _, err := j.dec.Token(); err != nil {
			return nil, itemError{fmt.Errorf("after item %d: %v", j.n, err)}
		}
		if t, err := j.dec.Token(); err != nil || t != json.Delim('}') {
			return nil, itemError{errors.New(`nothing may follow "items": put the group's fields first`)}
		}
		j.done = true
		return nil, io.EOF
	}
	var v json.RawMessage
	if err := j.dec.Decode(&v); err != nil {
		if errors.Is(err, errOverBound) {
			return nil, itemError{fmt.Errorf("item %d: over the limit of %d bytes (--max-body-bytes)", j.n, j.max)}
		}
		return nil, itemError{fmt.Errorf("item %d: %v", j.n, err)}
	}
	j.n++
	return v, nil
}

type ndjsonItems struct {
	r      *bufio.Reader
	max    int64
	lineNo int
}

// line reads the next non-blank line, bounded by max.
func (l *ndjsonItems) line() ([]byte, error) {
	for {
		var buf []byte
		for {
			part, err := l.r.ReadSlice('\n')
			buf = append(buf, part...)
			if int64(len(buf)) > l.max+1 {
				return nil, itemError{fmt.Errorf("line %d: over the limit of %d bytes", l.lineNo+1, l.max)}
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err == io.EOF && len(buf) == 0 {
				return nil, io.EOF
			}
			if err != nil && err != io.EOF {
				return nil, err
			}
			break
		}
		l.lineNo++
		if t := bytes.TrimSpace(buf); len(t) > 0 {
			return t, nil
		}
	}
}

func (l *ndjsonItems) next() (json.RawMessage, error) {
	b, err := l.line()
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, itemError{fmt.Errorf("line %d (item %d): not a JSON value", l.lineNo, l.lineNo-2)}
	}
	return json.RawMessage(b), nil
}

// serveGroupStatus answers GET (status) and DELETE (cancel) of a group:
// /v1/topics/{topic}/groups/{id}, or /v1/groups/{id}, which finds the
// group's topic (its ?topic= or, without one, the topics the relays
// registered that the caller may see). The answer is internal/groups'
// Status, the one the admin API gives too, and DELETE is internal/groups'
// one cancel path (docs/groups.md).
func (g *Gate) serveGroupStatus(x *exchange) {
	allows, ok := g.redisRoute(x, "groups", http.MethodGet, http.MethodDelete)
	if !ok {
		return
	}
	id := x.r.PathValue("id")
	ctx, cancel := context.WithTimeout(x.r.Context(), g.cfg.ProduceTimeout)
	defer cancel()
	topics, err := g.groupTopics(ctx, x, allows)
	if err != nil {
		g.setRetryAfter(x)
		x.fail(http.StatusServiceUnavailable, "Redis is unavailable, retry later: %v", err)
		return
	}
	var answer any
	if x.r.Method == http.MethodDelete {
		var c groups.Cancelled
		if c, err = groups.Cancel(ctx, g.groups, topics, id, g.now()); err == nil {
			g.log.Info("bulk group cancelled", "group", id, "topic", c.Topic, "removed", c.Removed)
		}
		answer = c
	} else {
		answer, err = groups.Read(ctx, g.groups, topics, id, g.now())
	}
	var ambiguous *groups.AmbiguousError
	switch {
	case errors.Is(err, groups.ErrNotFound):
		x.fail(http.StatusNotFound, "group %q is not known (yet): a group appears once the relay moved its first job to Redis", id)
	case errors.As(err, &ambiguous):
		x.fail(http.StatusConflict, "%v: ask for one, GET /v1/topics/{topic}/groups/%s", err, id)
	case err != nil:
		g.setRetryAfter(x)
		x.fail(http.StatusServiceUnavailable, "Redis is unavailable, retry later: %v", err)
	default:
		x.json(http.StatusOK, answer)
	}
}

// groupTopics are the topics a group request looks in: the one it names
// (none when the name is not a topic's or the caller may not see it, so
// that such a group is as unknown as a missing one), else every topic the
// relays registered that the caller may see.
func (g *Gate) groupTopics(ctx context.Context, x *exchange, allows func(string) bool) ([]string, error) {
	topic := x.r.PathValue("topic")
	if topic == "" {
		topic = x.r.URL.Query().Get("topic")
	}
	if topic != "" {
		if queue.ValidTopic(topic) != nil || !allows(topic) {
			return nil, nil
		}
		return []string{topic}, nil
	}
	registered, err := g.groups.Topics(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(registered, func(t string) bool { return !allows(t) }), nil
}

// redisRoute admits a request to a route that reads Redis (groups, job
// lookups): its method among methods, its token, and a gate that has
// Redis (Config.RedisAddr). It answers the refusal itself; what names the
// route's subject in the 501.
func (g *Gate) redisRoute(x *exchange, what string, methods ...string) (allows func(string) bool, ok bool) {
	if !slices.Contains(methods, x.r.Method) {
		x.w.Header().Set("Allow", strings.Join(methods, ", "))
		x.fail(http.StatusMethodNotAllowed, "method %s not allowed: use %s", x.r.Method, strings.Join(methods, " or "))
		return nil, false
	}
	allows, status, reason := g.auth.Load().Authenticate(x.r)
	if status != 0 {
		x.w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		x.fail(status, "%s", reason)
		return nil, false
	}
	if g.groups == nil {
		x.fail(http.StatusNotImplemented, "this gate has no Redis to read %s from: start it with --redis-addr", what)
		return nil, false
	}
	return allows, true
}
