package coordinator

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/job"
)

// GroupSummary is what the group's hash says of a completed bulk group.
type GroupSummary struct {
	Group, Topic string
	// Total is the group's size; Done + Dead + Cancelled >= Total.
	Total, Done, Dead, Cancelled int64
	CompletedAt                  time.Time
	// CancelledAt is zero unless the group was cancelled.
	CancelledAt time.Time
}

// Item states an ItemResult could have besides the queue's own ("done",
// "dead", "cancelled").
const (
	// StateMissing was an item whose job record had expired before the
	// group was delivered.
	//
	// Deprecated: no longer produced. A bulk group gathers its items'
	// results in one hash kept until the group is delivered, and an item
	// it does not name completed without a result ("done").
	StateMissing = "missing"
)

// ItemResult is one item of a completed bulk group, in index order.
type ItemResult struct {
	// Index is the item's position in the submission; ID is
	// job.BulkID(group, Index).
	Index int64
	ID    string
	// State is "done", "dead" or "cancelled".
	State string
	// Result is what the handler returned, byte for byte (done jobs; may
	// be empty).
	Result []byte
	// Error is the last attempt's error (dead jobs).
	Error string
	// Attempts is how many attempts the item took when the group's
	// results record it (dead items, and done ones with a result); 0
	// when not recorded (done without a result, cancelled).
	Attempts int
}

// Body is a callback's body. It is sent whole on every attempt, each
// attempt reading it through a reader of its own, so Data must allow
// concurrent ReadAt (bytes.Reader and os.File do).
type Body struct {
	ContentType string
	Data        io.ReaderAt
	Size        int64
	// Close, if set, frees Data once the delivery ended.
	Close func() error
}

// BytesBody is a Body held in memory.
func BytesBody(contentType string, b []byte) Body {
	return Body{ContentType: contentType, Data: bytes.NewReader(b), Size: int64(len(b))}
}

// A Reducer folds a completed group's items into the body of its callback.
// The watcher calls Add once per item, in index order, then Finish once. If
// the aggregation is abandoned (the coordinator stops, Redis fails), it
// still calls Finish, and closes the body unsent, so that what the reducer
// holds is freed.
type Reducer interface {
	Add(ItemResult) error
	Finish() (Body, error)
}

// ReducerFactory makes the reducer of one group. The summary is known
// before any item is read, so a reducer can write it first and stream the
// items after it.
type ReducerFactory func(GroupSummary) (Reducer, error)

// JSONReducer is the default reducer: a JSON object with the group's counts
// and one entry per item, in index order:
//
//	{"group":"g","topic":"jobs","total":2,"done":1,"dead":1,"cancelled":0,
//	 "completed_at":"2026-11-21T14:26:42.123Z","items":[
//	 {"index":0,"id":"g.0","state":"done","result":{"ok":true},"attempts":1},
//	 {"index":1,"id":"g.1","state":"dead","error":"boom","attempts":3}]}
//
// A result that is valid JSON is embedded as it is, byte for byte; other
// UTF-8 text becomes a JSON string; bytes that are not UTF-8 go into
// "result_base64" (with "result": null), since a JSON string cannot carry
// them unchanged. A done item without a result has "result": null. The
// body is built in memory up to spillAbove bytes, then in a temporary file
// in dir ("": the system's), so a million-item group does not sit in the
// heap.
func JSONReducer(spillAbove int64, dir string) ReducerFactory {
	return func(s GroupSummary) (Reducer, error) {
		r := &jsonReducer{out: &spillBuffer{limit: spillAbove, dir: dir}}
		b := append(r.line[:0], `{"group":`...)
		b = job.AppendString(b, s.Group)
		b = append(b, `,"topic":`...)
		b = job.AppendString(b, s.Topic)
		for _, f := range []struct {
			name string
			n    int64
		}{{"total", s.Total}, {"done", s.Done}, {"dead", s.Dead}, {"cancelled", s.Cancelled}} {
			b = append(b, `,"`+f.name+`":`...)
			b = strconv.AppendInt(b, f.n, 10)
		}
		b = append(b, `,"completed_at":`...)
		b = appendTime(b, s.CompletedAt)
		if !s.CancelledAt.IsZero() {
			b = append(b, `,"cancelled_at":`...)
			b = appendTime(b, s.CancelledAt)
		}
		b = append(b, `,"items":[`...)
		r.line = b
		if _, err := r.out.Write(b); err != nil {
			r.out.discard()
			return nil, err
		}
		return r, nil
	}
}

type jsonReducer struct {
	out   *spillBuffer
	line  []byte
	items int64
	err   error
}

func (r *jsonReducer) Add(it ItemResult) error {
	if r.err != nil {
		return r.err
	}
	b := r.line[:0]
	if r.items > 0 {
		b = append(b, ',')
	}
	r.items++
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, it.Index, 10)
	b = append(b, `,"id":`...)
	b = job.AppendString(b, it.ID)
	b = append(b, `,"state":`...)
	b = job.AppendString(b, it.State)
	if it.State == "done" {
		b = append(b, `,"result":`...)
		switch {
		case len(it.Result) == 0:
			b = append(b, "null"...)
		case json.Valid(it.Result):
			b = append(b, it.Result...)
		case utf8.Valid(it.Result):
			b = job.AppendString(b, string(it.Result))
		default:
			b = append(b, `null,"result_base64":"`...)
			b = base64.StdEncoding.AppendEncode(b, it.Result)
			b = append(b, '"')
		}
	}
	if it.Error != "" {
		b = append(b, `,"error":`...)
		b = job.AppendString(b, it.Error)
	}
	if it.Attempts > 0 {
		b = append(b, `,"attempts":`...)
		b = strconv.AppendInt(b, int64(it.Attempts), 10)
	}
	b = append(b, '}')
	r.line = b
	if _, err := r.out.Write(b); err != nil {
		r.err = err
	}
	return r.err
}

func (r *jsonReducer) Finish() (Body, error) {
	if r.err == nil {
		_, r.err = r.out.Write([]byte("]}\n"))
	}
	if r.err != nil {
		r.out.discard()
		return Body{}, r.err
	}
	return r.out.body("application/json")
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	return append(b, '"')
}

// spillBuffer holds a body in memory up to limit bytes, then moves it to a
// temporary file.
type spillBuffer struct {
	limit int64
	dir   string
	mem   bytes.Buffer
	file  *os.File
	w     *bufio.Writer
	size  int64
}

func (s *spillBuffer) Write(p []byte) (int, error) {
	if s.file == nil && s.size+int64(len(p)) > s.limit {
		f, err := os.CreateTemp(s.dir, "sluice-callback-*.json")
		if err != nil {
			return 0, err
		}
		s.file, s.w = f, bufio.NewWriterSize(f, 64<<10)
		if _, err := s.w.Write(s.mem.Bytes()); err != nil {
			return 0, err
		}
		s.mem = bytes.Buffer{}
	}
	s.size += int64(len(p))
	if s.file != nil {
		return s.w.Write(p)
	}
	return s.mem.Write(p)
}

func (s *spillBuffer) body(contentType string) (Body, error) {
	if s.file == nil {
		return BytesBody(contentType, s.mem.Bytes()), nil
	}
	if err := s.w.Flush(); err != nil {
		s.discard()
		return Body{}, err
	}
	f := s.file
	return Body{ContentType: contentType, Data: f, Size: s.size, Close: func() error {
		return errors.Join(f.Close(), os.Remove(f.Name()))
	}}, nil
}

// discard frees what the buffer holds.
func (s *spillBuffer) discard() {
	if s.file != nil {
		s.file.Close()
		os.Remove(s.file.Name())
		s.file = nil
	}
	s.mem = bytes.Buffer{}
}
