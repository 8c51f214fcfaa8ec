package gate

import (
	"encoding/json"
	"testing"
)

// The hand-written batch answer must say what encoding/json would.
func TestBatchAnswerMatchesEncodingJSON(t *testing.T) {
	p, o := int32(3), int64(42)
	b := batchBody{Topic: "jobs\"<x>", Accepted: 1, Rejected: 1, Results: []batchResult{
		{Index: 0, Status: 202, ID: "01J", Partition: &p, Offset: &o},
		{Index: 1, Status: 400, Error: "field \"type\": required\n", Field: "type"},
	}}
	var got, want any
	if err := json.Unmarshal(b.appendJSON(nil), &got); err != nil {
		t.Fatalf("appendJSON wrote invalid JSON: %v", err)
	}
	std, _ := json.Marshal(b)
	json.Unmarshal(std, &want)
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Fatalf("appendJSON:\n got %s\nwant %s", gotJSON, wantJSON)
	}
}
