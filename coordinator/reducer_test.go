package coordinator

import (
	"encoding/json"
	"io"
	"os"
	"testing"
	"time"
)

func reduce(t *testing.T, f ReducerFactory, items []ItemResult) []byte {
	t.Helper()
	r, err := f(GroupSummary{Group: `g"1`, Topic: "jobs", Total: int64(len(items)), CompletedAt: time.UnixMilli(1_800_000_000_123)})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if err := r.Add(it); err != nil {
			t.Fatal(err)
		}
	}
	b, err := r.Finish()
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(io.NewSectionReader(b.Data, 0, b.Size))
	if err != nil {
		t.Fatal(err)
	}
	if b.Close != nil {
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// The body is the same JSON whether it was built in memory or spilled to
// a file, and strings that need escaping come out valid.
func TestJSONReducerSpillsTheSameBody(t *testing.T) {
	var items []ItemResult
	for i := range 200 {
		items = append(items, ItemResult{Index: int64(i), ID: "x", State: "dead", Error: "line\nbreak \"quoted\" \u2028 <&>", Attempts: 2})
	}
	dir := t.TempDir()
	mem := reduce(t, JSONReducer(1<<30, dir), items)
	disk := reduce(t, JSONReducer(100, dir), items)
	if string(mem) != string(disk) {
		t.Fatalf("bodies differ:\n%s\n%s", mem, disk)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("spill files left: %v", left)
	}
	var v struct {
		Group       string `json:"group"`
		CompletedAt string `json:"completed_at"`
		Items       []struct{ Error string }
	}
	if err := json.Unmarshal(mem, &v); err != nil {
		t.Fatalf("%v: %s", err, mem)
	}
	if v.Group != `g"1` || v.CompletedAt != "2027-01-15T08:00:00.123Z" || len(v.Items) != 200 || v.Items[0].Error != items[0].Error {
		t.Fatalf("decoded: %+v", v)
	}
}
