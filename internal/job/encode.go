package job

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends the job's JSON encoding to dst and returns the result.
//
// It is written by hand rather than through encoding/json so that the payload
// is copied verbatim (encoding/json compacts a RawMessage and escapes <>&) and
// so that encoding a job costs no reflection on the gate's hot path.
func (j *Job) AppendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	first := true
	field := func(name string) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, '"', ':')
	}
	str := func(name, v string) {
		if v != "" {
			field(name)
			dst = AppendString(dst, v)
		}
	}
	num := func(name string, v int64) {
		if v != 0 {
			field(name)
			dst = strconv.AppendInt(dst, v, 10)
		}
	}
	tm := func(name string, v time.Time) {
		if !v.IsZero() {
			field(name)
			dst = append(dst, '"')
			dst = v.AppendFormat(dst, time.RFC3339Nano)
			dst = append(dst, '"')
		}
	}

	str("id", j.ID)
	if j.IDGiven {
		field("id_given")
		dst = append(dst, "true"...)
	}
	str("topic", j.Topic)
	field("type")
	dst = AppendString(dst, j.Type)
	str("group", j.Group)
	str("tenant", j.Tenant)
	str("resource", j.Resource)
	num("priority", int64(j.Priority))
	if len(j.Payload) > 0 {
		field("payload")
		dst = append(dst, j.Payload...)
	}
	str("idempotency_key", j.IdempotencyKey)
	num("max_attempts", int64(j.MaxAttempts))
	if j.Timeout != 0 {
		str("timeout", time.Duration(j.Timeout).String())
	}
	if j.Retain != 0 {
		str("retain", time.Duration(j.Retain).String())
	}
	tm("run_at", j.RunAt)
	tm("enqueued_at", j.EnqueuedAt)
	num("group_total", j.GroupTotal)
	str("callback_url", j.CallbackURL)
	str("traceparent", j.Traceparent)
	return append(dst, '}')
}

// MarshalJSON implements json.Marshaler with AppendJSON, so a Job nested in
// another document keeps its payload bytes too.
func (j *Job) MarshalJSON() ([]byte, error) { return j.AppendJSON(nil), nil }

const hexDigits = "0123456789abcdef"

// AppendString appends s to dst as a JSON string. Unlike encoding/json it leaves <, >
// and & alone (they are valid JSON); control characters are escaped and
// invalid UTF-8 becomes U+FFFD, as encoding/json does.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
