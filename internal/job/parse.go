package job

import (
	"bytes"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// The envelope parser. It is hand-written because decoding envelopes is most
// of the gate's work per job: encoding/json's reflection, its Decoder's
// copying and a second scan of the payload cost 3-4x more. It accepts
// exactly what encoding/json with DisallowUnknownFields accepts, except that
// field names are case-sensitive; FuzzDecodeMatchesEncodingJSON holds it to
// that.

// maxDepth bounds nesting, as encoding/json does, so a hostile payload of
// "[[[[..." cannot exhaust the stack.
const maxDepth = 10000

type parser struct {
	data []byte
	pos  int
}

// failure is a parse error: syntax errors end the document, others (wrong
// type, unknown field, invalid value) concern one field.
func (p *parser) syntax(off int, reason string) *DecodeError {
	return newDecodeError(p.data, off, "", reason, true)
}

func (p *parser) fieldErr(off int, field, reason string) *DecodeError {
	return newDecodeError(p.data, off, field, reason, false)
}

func newDecodeError(data []byte, off int, field, reason string, syntax bool) *DecodeError {
	e := &DecodeError{Offset: int64(off), Field: field, Reason: reason, syntax: syntax}
	if off >= 0 && off <= len(data) {
		before := data[:off]
		e.Line = bytes.Count(before, []byte{'\n'}) + 1
		e.Column = off - (bytes.LastIndexByte(before, '\n') + 1) + 1
	}
	return e
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) eof() bool { return p.pos >= len(p.data) }

func (p *parser) unexpected(context string) *DecodeError {
	if p.eof() {
		return p.syntax(p.pos, "unexpected end of input")
	}
	return p.syntax(p.pos, "invalid character "+quoteChar(p.data[p.pos])+" "+context)
}

func quoteChar(c byte) string {
	switch c {
	case '\'':
		return `'\''`
	case '"':
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	if c >= utf8.RuneSelf {
		s = strconv.Quote(string([]byte{c}))
	}
	return "'" + s[1:len(s)-1] + "'"
}

// kind names the JSON value starting at the current position, for errors.
func (p *parser) kind() string {
	if p.eof() {
		return "nothing"
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "bool"
	case c == 'n':
		return "null"
	default:
		return "number"
	}
}

// job parses one envelope object. A syntax error is returned as syn; the
// first field error as bad, after the whole object was read, so a stream can
// go on with the next item.
func (p *parser) job() (j *Job, bad, syn *DecodeError) {
	p.skipSpace()
	start := p.pos
	if p.eof() {
		return nil, nil, p.syntax(p.pos, "unexpected end of input")
	}
	if p.data[p.pos] != '{' {
		kind := p.kind()
		if err := p.skipValue(0); err != nil {
			return nil, nil, err
		}
		return nil, p.fieldErr(start, "", "want a job object, got "+kind), nil
	}
	p.pos++
	j = new(Job)
	p.skipSpace()
	if !p.eof() && p.data[p.pos] == '}' {
		p.pos++
		return j, nil, nil
	}
	for {
		p.skipSpace()
		if p.eof() || p.data[p.pos] != '"' {
			return nil, nil, p.unexpected("looking for beginning of object key string")
		}
		keyStart := p.pos
		key, err := p.str()
		if err != nil {
			return nil, nil, err
		}
		p.skipSpace()
		if p.eof() || p.data[p.pos] != ':' {
			return nil, nil, p.unexpected("after object key")
		}
		p.pos++
		p.skipSpace()
		ferr, err := p.field(j, key, keyStart)
		if err != nil {
			return nil, nil, err
		}
		if bad == nil {
			bad = ferr
		}
		p.skipSpace()
		if p.eof() {
			return nil, nil, p.syntax(p.pos, "unexpected end of input")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return j, bad, nil
		default:
			return nil, nil, p.unexpected("after object key:value pair")
		}
	}
}

// field reads one field's value into j.
func (p *parser) field(j *Job, key string, keyStart int) (bad, syn *DecodeError) {
	switch key {
	case "id":
		return p.stringField(&j.ID, key)
	case "topic":
		return p.stringField(&j.Topic, key)
	case "type":
		return p.stringField(&j.Type, key)
	case "group":
		return p.stringField(&j.Group, key)
	case "tenant":
		return p.stringField(&j.Tenant, key)
	case "resource":
		return p.stringField(&j.Resource, key)
	case "idempotency_key":
		return p.stringField(&j.IdempotencyKey, key)
	case "callback_url":
		return p.stringField(&j.CallbackURL, key)
	case "traceparent":
		return p.stringField(&j.Traceparent, key)
	case "priority":
		return p.intField(key, func(v int64) { j.Priority = int(v) })
	case "max_attempts":
		return p.intField(key, func(v int64) { j.MaxAttempts = int(v) })
	case "group_total":
		return p.intField(key, func(v int64) { j.GroupTotal = v })
	case "payload":
		start := p.pos
		if err := p.skipValue(1); err != nil {
			return nil, err
		}
		// The payload aliases the input: no copy, no re-encoding.
		j.Payload = p.data[start:p.pos:p.pos]
		return nil, nil
	case "timeout":
		return p.unmarshalerField(key, &j.Timeout)
	case "retain":
		return p.unmarshalerField(key, &j.Retain)
	case "id_given":
		return p.boolField(&j.IDGiven, key)
	case "run_at":
		return p.unmarshalerField(key, &j.RunAt)
	case "enqueued_at":
		return p.unmarshalerField(key, &j.EnqueuedAt)
	}
	if err := p.skipValue(1); err != nil {
		return nil, err
	}
	return p.fieldErr(keyStart, key, "unknown field (see docs/envelope.md)"), nil
}

// isNull consumes a null literal if one is next. As in encoding/json, null
// leaves a field as it was.
func (p *parser) isNull() bool {
	if bytes.HasPrefix(p.data[p.pos:], []byte("null")) {
		p.pos += 4
		return true
	}
	return false
}

func (p *parser) wrongType(field, want string) (bad, syn *DecodeError) {
	start, kind := p.pos, p.kind()
	if err := p.skipValue(1); err != nil {
		return nil, err
	}
	return p.fieldErr(start, field, "want "+want+", got "+kind), nil
}

func (p *parser) stringField(dst *string, field string) (bad, syn *DecodeError) {
	if p.isNull() {
		return nil, nil
	}
	if p.eof() || p.data[p.pos] != '"' {
		return p.wrongType(field, "a string")
	}
	s, err := p.str()
	if err != nil {
		return nil, err
	}
	*dst = s
	return nil, nil
}

// boolField reads true or false. Anything else (a string "true", 1) is a
// field error, as in encoding/json.
func (p *parser) boolField(dst *bool, field string) (bad, syn *DecodeError) {
	if p.isNull() {
		return nil, nil
	}
	if p.eof() || (p.data[p.pos] != 't' && p.data[p.pos] != 'f') {
		return p.wrongType(field, "true or false")
	}
	v := p.data[p.pos] == 't'
	word := "false"
	if v {
		word = "true"
	}
	if err := p.literal(word); err != nil {
		return nil, err
	}
	*dst = v
	return nil, nil
}

func (p *parser) intField(field string, set func(int64)) (bad, syn *DecodeError) {
	if p.isNull() {
		return nil, nil
	}
	if p.eof() || (p.data[p.pos] != '-' && (p.data[p.pos] < '0' || p.data[p.pos] > '9')) {
		return p.wrongType(field, "an integer")
	}
	start := p.pos
	if err := p.number(); err != nil {
		return nil, err
	}
	text := string(p.data[start:p.pos])
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return p.fieldErr(start, field, "want an integer, got number "+text), nil
	}
	set(v)
	return nil, nil
}

type jsonUnmarshaler interface{ UnmarshalJSON([]byte) error }

func (p *parser) unmarshalerField(field string, dst jsonUnmarshaler) (bad, syn *DecodeError) {
	if p.isNull() {
		return nil, nil
	}
	start := p.pos
	if err := p.skipValue(1); err != nil {
		return nil, err
	}
	if err := dst.UnmarshalJSON(p.data[start:p.pos]); err != nil {
		reason := err.Error()
		if fe, ok := err.(*FieldError); ok {
			reason = fe.Reason
		} else if _, isTime := dst.(*time.Time); isTime {
			reason = "want an RFC 3339 time like \"2026-01-02T15:04:05Z\": " + reason
		}
		return p.fieldErr(start, field, reason), nil
	}
	return nil, nil
}

// skipValue checks and skips any JSON value; depth is the nesting so far.
func (p *parser) skipValue(depth int) *DecodeError {
	if p.eof() {
		return p.syntax(p.pos, "unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '"':
		return p.skipString()
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return p.syntax(p.pos, "exceeded max depth")
		}
		return p.skipContainer(depth + 1)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	}
	return p.unexpected("looking for beginning of value")
}

func (p *parser) skipContainer(depth int) *DecodeError {
	open := p.data[p.pos]
	close := byte(']')
	if open == '{' {
		close = '}'
	}
	p.pos++
	p.skipSpace()
	if !p.eof() && p.data[p.pos] == close {
		p.pos++
		return nil
	}
	for {
		p.skipSpace()
		if open == '{' {
			if p.eof() || p.data[p.pos] != '"' {
				return p.unexpected("looking for beginning of object key string")
			}
			if err := p.skipString(); err != nil {
				return err
			}
			p.skipSpace()
			if p.eof() || p.data[p.pos] != ':' {
				return p.unexpected("after object key")
			}
			p.pos++
			p.skipSpace()
		}
		if err := p.skipValue(depth); err != nil {
			return err
		}
		p.skipSpace()
		if p.eof() {
			return p.syntax(p.pos, "unexpected end of input")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case close:
			p.pos++
			return nil
		default:
			if open == '{' {
				return p.unexpected("after object key:value pair")
			}
			return p.unexpected("after array element")
		}
	}
}

func (p *parser) literal(word string) *DecodeError {
	for i := 0; i < len(word); i++ {
		if p.eof() {
			return p.syntax(p.pos, "unexpected end of input")
		}
		if p.data[p.pos] != word[i] {
			return p.unexpected("in literal " + word + " (expecting " + quoteChar(word[i]) + ")")
		}
		p.pos++
	}
	return nil
}

// number skips a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) number() *DecodeError {
	digits := func() int {
		n := 0
		for !p.eof() && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.data[p.pos] == '-' {
		p.pos++
	}
	switch {
	case p.eof():
		return p.syntax(p.pos, "unexpected end of input")
	case p.data[p.pos] == '0':
		p.pos++
	case p.data[p.pos] >= '1' && p.data[p.pos] <= '9':
		digits()
	default:
		return p.unexpected("in numeric literal")
	}
	if !p.eof() && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return p.unexpected("after decimal point in numeric literal")
		}
	}
	if !p.eof() && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if !p.eof() && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return p.unexpected("in exponent of numeric literal")
		}
	}
	return nil
}

// skipString checks and skips a string without building it.
func (p *parser) skipString() *DecodeError {
	p.pos++ // the opening quote
	for !p.eof() {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return nil
		case c == '\\':
			if err := p.skipEscape(); err != nil {
				return err
			}
			continue
		case c < 0x20:
			return p.unexpected("in string literal")
		}
		p.pos++
	}
	return p.syntax(p.pos, "unexpected end of input")
}

// str reads a string, unescaping it; invalid UTF-8 and lone surrogates
// become U+FFFD, as encoding/json does.
func (p *parser) str() (string, *DecodeError) {
	p.pos++ // the opening quote
	start := p.pos
	ascii := true
	for !p.eof() {
		c := p.data[p.pos]
		switch {
		case c == '"':
			s := p.data[start:p.pos]
			p.pos++
			if ascii || utf8.Valid(s) {
				return string(s), nil
			}
			return string(appendValidUTF8(nil, s)), nil
		case c == '\\':
			return p.strSlow(start)
		case c < 0x20:
			return "", p.unexpected("in string literal")
		case c >= utf8.RuneSelf:
			ascii = false
		}
		p.pos++
	}
	return "", p.syntax(p.pos, "unexpected end of input")
}

// strSlow finishes a string that holds escapes; p.pos is at the first one.
func (p *parser) strSlow(start int) (string, *DecodeError) {
	buf := make([]byte, 0, p.pos-start+16)
	buf = appendValidUTF8(buf, p.data[start:p.pos])
	for !p.eof() {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c == '\\':
			var err *DecodeError
			if buf, err = p.appendEscape(buf); err != nil {
				return "", err
			}
			continue
		case c < 0x20:
			return "", p.unexpected("in string literal")
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			p.pos++
			continue
		}
		r, size := utf8.DecodeRune(p.data[p.pos:])
		buf = utf8.AppendRune(buf, r) // RuneError for an invalid byte
		p.pos += size
	}
	return "", p.syntax(p.pos, "unexpected end of input")
}

func appendValidUTF8(dst, s []byte) []byte {
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		if r == utf8.RuneError && size == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, s[:size]...)
		}
		s = s[size:]
	}
	return dst
}

// skipEscape checks the escape at p.pos and skips it.
func (p *parser) skipEscape() *DecodeError {
	p.pos++ // the backslash
	if p.eof() {
		return p.syntax(p.pos, "unexpected end of input")
	}
	switch p.data[p.pos] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		p.pos++
		return nil
	case 'u':
		p.pos++
		_, err := p.hex4()
		return err
	}
	return p.unexpected("in string escape code")
}

// appendEscape decodes the escape at p.pos onto buf.
func (p *parser) appendEscape(buf []byte) ([]byte, *DecodeError) {
	p.pos++ // the backslash
	if p.eof() {
		return buf, p.syntax(p.pos, "unexpected end of input")
	}
	c := p.data[p.pos]
	p.pos++
	switch c {
	case '"', '\\', '/':
		return append(buf, c), nil
	case 'b':
		return append(buf, '\b'), nil
	case 'f':
		return append(buf, '\f'), nil
	case 'n':
		return append(buf, '\n'), nil
	case 'r':
		return append(buf, '\r'), nil
	case 't':
		return append(buf, '\t'), nil
	case 'u':
		r, err := p.hex4()
		if err != nil {
			return buf, err
		}
		if utf16.IsSurrogate(r) {
			// A high surrogate must be followed by \u and a low one.
			if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
				save := p.pos
				p.pos += 2
				r2, err := p.hex4()
				if err != nil {
					return buf, err
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					return utf8.AppendRune(buf, dec), nil
				}
				p.pos = save
			}
			r = utf8.RuneError
		}
		return utf8.AppendRune(buf, r), nil
	}
	p.pos--
	return buf, p.unexpected("in string escape code")
}

func (p *parser) hex4() (rune, *DecodeError) {
	var r rune
	for range 4 {
		if p.eof() {
			return 0, p.syntax(p.pos, "unexpected end of input")
		}
		c := p.data[p.pos]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, p.unexpected("in \\u hexadecimal character escape")
		}
		r = r<<4 | rune(c)
		p.pos++
	}
	return r, nil
}
