// Package jobcheck holds the checks and the payload encoding a job gets
// before it is sent, shared by the client and client/sluicetest's
// Recorder, so that the fake refuses what the client refuses.
package jobcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// The options each call takes, by name.
var (
	// Job are the options of a single or batched job.
	Job = []string{"ID", "Group", "Tenant", "Resource", "Priority", "RunAt", "Delay", "MaxAttempts", "Timeout", "IdempotencyKey", "Retain", "Acks"}
	// Batch are EnqueueBatch's own (its jobs take Job's).
	Batch = []string{"Acks"}
	// Group are the fields the gate takes for a bulk group.
	Group = []string{"ID", "Tenant", "Resource", "Priority", "MaxAttempts", "Timeout", "Acks", "Callback"}
)

// Only fails when an option outside allowed was given.
func Only(call string, given, allowed []string) error {
	for _, name := range given {
		ok := false
		for _, a := range allowed {
			ok = ok || a == name
		}
		if !ok {
			return fmt.Errorf("client: %s: option %s does not apply (it takes %v)", call, name, allowed)
		}
	}
	return nil
}

// Kinder is a payload that names its job type (client.JobArgs).
type Kinder interface{ Kind() string }

// Type is the job's type: jobType when given, else the payload's Kind().
// Its error says how to give one.
func Type(jobType string, payload any) (string, error) {
	if jobType == "" {
		if k, ok := payload.(Kinder); ok {
			jobType = k.Kind()
		}
	}
	if jobType == "" {
		return "", fmt.Errorf("client: a job needs a type: pass one, or a payload whose type has a Kind() string method (client.JobArgs); %T has none", payload)
	}
	return jobType, nil
}

// Payload encodes v as JSON without escaping <, > and & (the payload
// reaches the handler byte for byte as encoded here). A json.RawMessage or
// []byte is taken as it is and must be valid JSON; nil is no payload.
func Payload(v any) (json.RawMessage, error) {
	switch p := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if !json.Valid(p) {
			return nil, errors.New("client: the payload is not valid JSON")
		}
		return p, nil
	case []byte:
		if !json.Valid(p) {
			return nil, errors.New("client: the payload is not valid JSON")
		}
		return p, nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("client: encoding the payload: %w", err)
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// GroupType is a bulk group's job type: jobType when given, else the one
// Kind() every item answers.
func GroupType(jobType string, items []any) (string, error) {
	if jobType != "" {
		return jobType, nil
	}
	var kind string
	for i, item := range items {
		k, err := Type("", item)
		if err != nil {
			return "", fmt.Errorf("client: a group needs a job type: pass one, or items whose type has a Kind() string method (client.JobArgs); item %d (%T) has none", i, item)
		}
		if i > 0 && k != kind {
			return "", fmt.Errorf("client: a group has one job type: item 0 is %q, item %d (%T) %q; pass the type", kind, i, item, k)
		}
		kind = k
	}
	if kind == "" {
		return "", errors.New("client: a group needs a job type")
	}
	return kind, nil
}
