package job

// The gate's HTTP wire types that its clients decode or send as they are
// (gate/ and client/ share them, docs/gate.md).

// ErrorBody is every error answer of the gate. Position fields are set for
// decode errors.
type ErrorBody struct {
	Error  string `json:"error"`
	Field  string `json:"field,omitempty"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
	Offset *int64 `json:"offset,omitempty"`
	// IDs are the jobs whose fate is unknown after a 504: resend them with
	// the same ids. The relay will not queue a resend twice when the first
	// send carried the id too (id_given); an id the gate assigned was not
	// marked, so a resend of it may run the job twice.
	IDs []string `json:"ids,omitempty"`
}

// GroupFields are a bulk group's fields in POST /v1/topics/{topic}/groups
// (the JSON body's, or the NDJSON body's first line): every item's job
// gets them.
type GroupFields struct {
	ID          string    `json:"id,omitempty"`
	Type        string    `json:"type"`
	Tenant      string    `json:"tenant,omitempty"`
	Resource    string    `json:"resource,omitempty"`
	Priority    int       `json:"priority,omitempty"`
	CallbackURL string    `json:"callback_url,omitempty"`
	MaxAttempts int       `json:"max_attempts,omitempty"`
	Timeout     *Duration `json:"timeout,omitempty"`
}
