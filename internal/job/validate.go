package job

import (
	"fmt"
	"net/url"
	"time"
	"unicode/utf8"
)

// Validate checks an envelope as a client sent it, before Defaults. topic is
// the topic named by the URL; a client-supplied topic must equal it. now
// bounds run_at. The first problem found is returned as a *FieldError.
// id_given is not checked: the gate overwrites it (Defaults).
func (j *Job) Validate(topic string, now time.Time) error {
	if j.Type == "" {
		return &FieldError{Field: "type", Reason: "required: names the handler that runs the job"}
	}
	if err := checkKey("type", j.Type, MaxTypeLen); err != nil {
		return err
	}
	if j.Topic != "" && j.Topic != topic {
		return &FieldError{Field: "topic", Reason: fmt.Sprintf("is %q but the job was posted to topic %q; leave it out", j.Topic, topic)}
	}
	if j.ID != "" {
		if err := checkKey("id", j.ID, MaxIDLen); err != nil {
			return err
		}
	}
	for _, f := range []struct{ name, v string }{
		{"group", j.Group}, {"tenant", j.Tenant}, {"resource", j.Resource}, {"idempotency_key", j.IdempotencyKey},
	} {
		if f.v != "" {
			if err := checkKey(f.name, f.v, MaxNameLen); err != nil {
				return err
			}
		}
	}
	if j.Priority < 0 || j.Priority > MaxPriority {
		return &FieldError{Field: "priority", Reason: fmt.Sprintf("%d is out of range 0..%d", j.Priority, MaxPriority)}
	}
	if j.MaxAttempts < 0 || j.MaxAttempts > MaxMaxAttempts {
		return &FieldError{Field: "max_attempts", Reason: fmt.Sprintf("%d is out of range 0..%d (0: the worker's default)", j.MaxAttempts, MaxMaxAttempts)}
	}
	if t := time.Duration(j.Timeout); t < 0 || t > MaxTimeout {
		return &FieldError{Field: "timeout", Reason: fmt.Sprintf("%s is out of range 0..%s", t, MaxTimeout)}
	}
	if r := time.Duration(j.Retain); r < 0 || r > MaxRetain {
		return &FieldError{Field: "retain", Reason: fmt.Sprintf("%s is out of range 0..%s (0: not kept after the job ends)", r, MaxRetain)}
	}
	if !j.RunAt.IsZero() && j.RunAt.After(now.Add(MaxRunAtAhead)) {
		return &FieldError{Field: "run_at", Reason: fmt.Sprintf("more than %s ahead", MaxRunAtAhead)}
	}
	if j.GroupTotal < 0 {
		return &FieldError{Field: "group_total", Reason: "must not be negative"}
	}
	if j.CallbackURL != "" {
		if err := checkURL("callback_url", j.CallbackURL); err != nil {
			return err
		}
	}
	return nil
}

// checkKey accepts names that end up inside Redis keys and log lines:
// printable UTF-8 without spaces, bounded in length.
func checkKey(field, v string, max int) error {
	if len(v) > max {
		return &FieldError{Field: field, Reason: fmt.Sprintf("longer than %d bytes", max)}
	}
	if !utf8.ValidString(v) {
		return &FieldError{Field: field, Reason: "not valid UTF-8"}
	}
	for _, r := range v {
		if r <= ' ' || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			return &FieldError{Field: field, Reason: fmt.Sprintf("contains %q: spaces and control characters are not allowed", r)}
		}
	}
	return nil
}

func checkURL(field, v string) error {
	if len(v) > MaxURLLen {
		return &FieldError{Field: field, Reason: fmt.Sprintf("longer than %d bytes", MaxURLLen)}
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &FieldError{Field: field, Reason: "want an absolute http:// or https:// URL"}
	}
	return nil
}
