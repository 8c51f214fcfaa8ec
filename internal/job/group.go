package job

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// A bulk group (POST /v1/topics/{topic}/groups) is a set of jobs submitted
// together: item i of group g becomes job BulkID(g, i), and after the last
// item the gate writes a GroupClose to the same Kafka partition (the key is
// the group), so the relay sees it after every item. The close carries the
// group's total: the group completes once that many of its jobs have ended.

// MaxBulkGroupLen bounds a bulk group's id, so that its jobs' ids (the
// group, a dot, the item's index) fit MaxIDLen.
const MaxBulkGroupLen = MaxIDLen - 1 - 10

// BulkID is the id of item i of bulk group group: stable, so a resubmitted
// group is deduped job by job, and the group watcher finds every item's
// result without a list of ids.
func BulkID(group string, i int64) string { return group + "." + strconv.FormatInt(i, 10) }

// ControlHeader is the Kafka header that marks a control record; its value
// says which. Records without it are job envelopes.
const ControlHeader = "sluice-control"

// GroupCloseControl is ControlHeader's value on a GroupClose record.
const GroupCloseControl = "group-close"

// GroupClose ends a bulk group's submission: with its total, or, when the
// submission failed halfway, by cancelling what was written.
type GroupClose struct {
	Group       string `json:"group"`
	Total       int64  `json:"total"`
	CallbackURL string `json:"callback_url,omitempty"`
	Cancel      bool   `json:"cancel,omitempty"`
}

// DecodeGroupClose reads and checks a GroupClose record's value.
func DecodeGroupClose(b []byte) (GroupClose, error) {
	var c GroupClose
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("group close: %v", err)
	}
	return c, c.Check()
}

// Check reports what makes c invalid: its group, total or callback URL.
func (c GroupClose) Check() error {
	if c.Group == "" || len(c.Group) > MaxBulkGroupLen {
		return fmt.Errorf("group close: group %q: want 1..%d bytes", c.Group, MaxBulkGroupLen)
	}
	if err := checkKey("group", c.Group, MaxBulkGroupLen); err != nil {
		return err
	}
	if c.Total < 0 {
		return fmt.Errorf("group close: total %d is negative", c.Total)
	}
	if c.CallbackURL != "" {
		return checkURL("callback_url", c.CallbackURL)
	}
	return nil
}
