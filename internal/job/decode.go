package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DecodeError says why a document is not a job envelope and where.
type DecodeError struct {
	// Offset is the byte offset in the input where the problem was found;
	// Line and Column (1-based) locate the same place for people.
	Offset       int64
	Line, Column int
	// Field names the offending field when one is known.
	Field  string
	Reason string
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

// FieldError says which field of an envelope is invalid and why.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %q: %s", e.Field, e.Reason) }

// Decode reads exactly one job envelope from data. Unknown fields are an
// error (a typo such as "prioirty" must not be dropped silently), and so is
// anything but whitespace after the object. The payload keeps its bytes.
func Decode(data []byte) (*Job, error) {
	s := NewStream(bytes.NewReader(data), data)
	j, err, _ := s.decodeOne()
	if err != nil {
		return nil, err
	}
	if s.dec.More() {
		off := s.dec.InputOffset()
		return nil, s.errAt(off, "", "unexpected data after the job object")
	}
	if _, err := s.dec.Token(); err != io.EOF {
		return nil, s.errAt(s.dec.InputOffset(), "", "unexpected data after the job object")
	}
	return j, nil
}

// Stream reads job envelopes from a JSON array of objects or from NDJSON
// (objects separated by newlines), whichever the input holds. A syntax error
// ends the stream; a well-formed object that is not a valid envelope is
// reported for that item alone and the stream goes on.
type Stream struct {
	dec   *json.Decoder
	src   []byte // the whole input when known, to turn offsets into lines
	array bool
	began bool
	done  bool
	count int
}

// NewStream returns a Stream over r. src, if not nil, is the same input held
// in memory; it only serves to report line and column numbers.
func NewStream(r io.Reader, src []byte) *Stream {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	return &Stream{dec: dec, src: src}
}

// Next returns the next job. At the end of the input it returns io.EOF. An
// error of type *ItemError concerns only that item: call Next again for the
// next one. Any other error is fatal to the stream.
func (s *Stream) Next() (*Job, error) {
	if s.done {
		return nil, io.EOF
	}
	if !s.began {
		s.began = true
		if err := s.begin(); err != nil {
			s.done = true
			return nil, err
		}
	}
	if !s.dec.More() {
		s.done = true
		if s.array {
			// Consume the closing bracket and insist on nothing after it.
			if _, err := s.dec.Token(); err != nil {
				return nil, s.wrap(err)
			}
			if _, err := s.dec.Token(); err != io.EOF {
				return nil, s.errAt(s.dec.InputOffset(), "", "unexpected data after the array")
			}
		}
		return nil, io.EOF
	}
	s.count++
	j, err, fatal := s.decodeOne()
	if err != nil {
		if !fatal {
			return nil, &ItemError{Index: s.count - 1, Err: err}
		}
		s.done = true
		return nil, err
	}
	return j, nil
}

// Count is the number of items read so far, valid or not.
func (s *Stream) Count() int { return s.count }

// ItemError is an invalid item inside a stream that can be skipped.
type ItemError struct {
	Index int // 0-based position in the stream
	Err   error
}

func (e *ItemError) Error() string { return fmt.Sprintf("item %d: %v", e.Index, e.Err) }
func (e *ItemError) Unwrap() error { return e.Err }

// begin decides between array and NDJSON by the first non-space byte.
func (s *Stream) begin() error {
	s.dec.More() // fills the decoder's buffer up to the first token
	buffered, _ := io.ReadAll(io.LimitReader(s.dec.Buffered(), 1<<16))
	switch firstNonSpace(buffered) {
	case 0:
		return s.errAt(s.dec.InputOffset(), "", "empty body: want a JSON array of jobs or NDJSON")
	case '[':
		s.array = true
		if _, err := s.dec.Token(); err != nil {
			return s.wrap(err)
		}
	case '{':
	default:
		return s.errAt(s.dec.InputOffset(), "", "want a JSON array of job objects or NDJSON (one job object per line)")
	}
	return nil
}

func firstNonSpace(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

// decodeOne decodes the next value as a job. fatal reports a syntax error,
// after which the decoder cannot go on; other errors (wrong type, unknown
// field, invalid value) leave the decoder after the value, so a Stream can
// continue with the next item.
func (s *Stream) decodeOne() (j *Job, err error, fatal bool) {
	start := s.dec.InputOffset()
	j = new(Job)
	derr := s.dec.Decode(j)
	if derr == nil {
		return j, nil, false
	}
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
		fe  *FieldError
	)
	switch {
	case errors.As(derr, &syn):
		return nil, s.syntaxErr(start, syn), true
	case errors.As(derr, &typ):
		if typ.Field == "" {
			return nil, s.errAt(start+typ.Offset, "", "want a job object, got "+typ.Value), false
		}
		return nil, s.errAt(start+typ.Offset, typ.Field, "want "+jsonKind(typ.Type.Kind().String())+", got "+typ.Value), false
	case errors.As(derr, &fe):
		return nil, s.errAt(s.dec.InputOffset(), fe.Field, fe.Reason), false
	case derr == io.EOF:
		return nil, s.errAt(start, "", "empty body: want a JSON object"), true
	case strings.HasPrefix(derr.Error(), "json: unknown field "):
		// encoding/json has no typed error for this one.
		name := strings.Trim(strings.TrimPrefix(derr.Error(), "json: unknown field "), `"`)
		return nil, s.errAt(s.dec.InputOffset(), name, "unknown field (see docs/envelope.md)"), false
	default:
		return nil, s.wrap(derr), true
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "int", "int64", "int32":
		return "an integer"
	case "float64":
		return "a number"
	case "struct", "map":
		return "an object"
	case "slice":
		return "an array"
	}
	return goKind
}

func (s *Stream) wrap(err error) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return s.syntaxErr(s.dec.InputOffset(), syn)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
		return s.errAt(s.dec.InputOffset(), "", "unexpected end of input")
	}
	return &DecodeError{Offset: s.dec.InputOffset(), Reason: err.Error()}
}

// syntaxErr locates a syntax error in the value that starts at start.
// encoding/json's Decoder counts SyntaxError offsets differently for the
// first value of a stream and for later ones, so when the input is at hand,
// the value is scanned again on its own, where the offset is exact: the
// number of bytes read up to and including the offending one.
func (s *Stream) syntaxErr(start int64, syn *json.SyntaxError) *DecodeError {
	reason := strings.TrimPrefix(syn.Error(), "json: ")
	if s.src == nil || start < 0 || start > int64(len(s.src)) {
		return &DecodeError{Offset: syn.Offset, Reason: reason}
	}
	i := start + skipSpace(s.src[start:])
	if i < int64(len(s.src)) && s.src[i] == ',' {
		i++
		i += skipSpace(s.src[i:])
	}
	var raw json.RawMessage
	var again *json.SyntaxError
	if err := json.NewDecoder(bytes.NewReader(s.src[i:])).Decode(&raw); errors.As(err, &again) {
		return s.errAt(i+max(again.Offset-1, 0), "", strings.TrimPrefix(again.Error(), "json: "))
	}
	return &DecodeError{Offset: syn.Offset, Reason: reason}
}

func skipSpace(b []byte) int64 {
	for i, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return int64(i)
	}
	return int64(len(b))
}

func (s *Stream) errAt(off int64, field, reason string) *DecodeError {
	e := &DecodeError{Offset: off, Field: field, Reason: reason}
	if s.src != nil && off >= 0 && off <= int64(len(s.src)) {
		before := s.src[:off]
		e.Line = bytes.Count(before, []byte{'\n'}) + 1
		e.Column = int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	}
	return e
}
