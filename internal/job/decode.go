package job

import (
	"fmt"
	"io"
	"strings"
)

// DecodeError says why a document is not a job envelope and where.
type DecodeError struct {
	// Offset is the byte offset in the input of the offending byte (for a
	// field error, of the field's value or name); Line and Column (1-based)
	// locate the same place for people.
	Offset       int64
	Line, Column int
	// Field names the offending field when one is known.
	Field  string
	Reason string

	syntax bool // the document itself is malformed, not just a field
}

func (e *DecodeError) Error() string {
	var b strings.Builder
	if e.Field != "" {
		fmt.Fprintf(&b, "field %q: ", e.Field)
	}
	b.WriteString(e.Reason)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d, column %d, byte %d)", e.Line, e.Column, e.Offset)
	}
	return b.String()
}

// Syntax reports whether the input is not well-formed JSON, as opposed to
// well-formed JSON that is not a valid envelope.
func (e *DecodeError) Syntax() bool { return e.syntax }

// FieldError says which field of an envelope is invalid and why.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %q: %s", e.Field, e.Reason) }

// Decode reads exactly one job envelope from data. Unknown fields are an
// error (a typo such as "prioirty" must not be dropped silently), field
// names are case-sensitive, and nothing but whitespace may follow the
// object. The payload keeps its bytes: j.Payload is a sub-slice of data, so
// data must not be modified while the job is in use.
func Decode(data []byte) (*Job, error) {
	p := parser{data: data}
	p.skipSpace()
	if p.eof() {
		return nil, p.syntax(p.pos, "empty body: want a JSON object")
	}
	j, bad, syn := p.job()
	if syn != nil {
		return nil, syn
	}
	p.skipSpace()
	if !p.eof() {
		return nil, p.syntax(p.pos, "unexpected data after the job object")
	}
	if bad != nil {
		return nil, bad
	}
	return j, nil
}

// Stream reads job envelopes from a JSON array of objects or from NDJSON
// (objects separated by newlines), whichever the input holds. A syntax error
// ends the stream; a well-formed item that is not a valid envelope is
// reported for that item alone and the stream goes on.
type Stream struct {
	p     parser
	array bool
	began bool
	done  bool
	count int
}

// NewStream returns a Stream over src. Jobs' payloads alias src.
func NewStream(src []byte) *Stream { return &Stream{p: parser{data: src}} }

// ItemError is an invalid item inside a stream that can be skipped.
type ItemError struct {
	Index int // 0-based position in the stream
	Err   error
}

func (e *ItemError) Error() string { return fmt.Sprintf("item %d: %v", e.Index, e.Err) }
func (e *ItemError) Unwrap() error { return e.Err }

// Count is the number of items read so far, valid or not.
func (s *Stream) Count() int { return s.count }

// Next returns the next job. At the end of the input it returns io.EOF. An
// error of type *ItemError concerns only that item: call Next again for the
// next one. Any other error (a *DecodeError) is fatal to the stream.
func (s *Stream) Next() (*Job, error) {
	if s.done {
		return nil, io.EOF
	}
	j, err := s.next()
	if err != nil {
		if _, isItem := err.(*ItemError); !isItem {
			s.done = true
		}
	}
	return j, err
}

func (s *Stream) next() (*Job, error) {
	p := &s.p
	p.skipSpace()
	if !s.began {
		s.began = true
		switch {
		case p.eof():
			return nil, p.syntax(p.pos, "empty body: want a JSON array of jobs or NDJSON")
		case p.data[p.pos] == '[':
			s.array = true
			p.pos++
		case p.data[p.pos] != '{':
			return nil, p.syntax(p.pos, "want a JSON array of job objects or NDJSON (one job object per line)")
		}
	}
	afterComma := false
	if s.array && s.count > 0 {
		switch {
		case p.eof():
			return nil, p.syntax(p.pos, "unexpected end of input")
		case p.data[p.pos] == ',':
			p.pos++
			afterComma = true
		case p.data[p.pos] != ']':
			return nil, p.unexpected("after array element")
		}
	}
	p.skipSpace()
	if s.array && !afterComma && !p.eof() && p.data[p.pos] == ']' {
		p.pos++
		p.skipSpace()
		if !p.eof() {
			return nil, p.syntax(p.pos, "unexpected data after the array")
		}
		s.done = true
		return nil, io.EOF
	}
	if !s.array && p.eof() {
		s.done = true
		return nil, io.EOF
	}
	s.count++
	j, bad, syn := p.job()
	switch {
	case syn != nil:
		return nil, syn
	case bad != nil:
		return nil, &ItemError{Index: s.count - 1, Err: bad}
	}
	return j, nil
}
