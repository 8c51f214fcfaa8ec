package gate

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// hugeBody is a request body of prefix, n bytes of filler, then suffix,
// made as it is read (nothing of it sits in memory), counting the bytes
// its reader took.
type hugeBody struct {
	r    io.Reader
	read int64
}

func newHugeBody(prefix string, filler byte, n int64, suffix string) *hugeBody {
	return &hugeBody{r: io.MultiReader(strings.NewReader(prefix), io.LimitReader(repeatByte(filler), n), strings.NewReader(suffix))}
}

func (h *hugeBody) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.read += int64(n)
	return n, err
}

type repeatByte byte

func (r repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// readsAtMost is what a bounded read of a field or item may take of the
// body: its limit, 4 KiB of slack, and a read buffer's worth of
// look-ahead.
const readsAtMost = groupTestLimit + 4<<10 + 64<<10

const groupTestLimit = 1 << 20

// TestGroupJSONItemIsBoundedWhileRead: one 64 MiB item in a bulk group's
// JSON form is refused once its reader passed the item limit, not after
// the whole item sat in memory (issue 31: one 128 MiB item took the gate
// from 43 MB to 569 MB resident).
func TestGroupJSONItemIsBoundedWhileRead(t *testing.T) {
	body := newHugeBody(`{"type":"t","items":["`, 'a', 64<<20, `"]}`)
	r := httptest.NewRequest("POST", "/v1/topics/jobs/groups", body)
	r.Header.Set("Content-Type", "application/json")
	items, _, err := openGroupBody(r, groupTestLimit)
	if err != nil {
		t.Fatal(err)
	}
	item, err := items.next()
	if err == nil {
		t.Fatalf("a %d-byte item was read whole (limit %d)", len(item), groupTestLimit)
	}
	if !strings.Contains(err.Error(), "item 0: over the limit of 1048576 bytes (--max-body-bytes)") {
		t.Errorf("error %.200q does not name the item and the limit", err)
	}
	if body.read > readsAtMost {
		t.Errorf("read %d bytes of the body for a %d-byte limit: not bounded while reading", body.read, groupTestLimit)
	}
}

// TestGroupJSONFieldIsBoundedWhileRead: the same for a field before
// "items" (an unknown one, which would be refused only once decoded) and
// for a field's name.
func TestGroupJSONFieldIsBoundedWhileRead(t *testing.T) {
	for name, body := range map[string]*hugeBody{
		"value": newHugeBody(`{"type":"t","junk":"`, 'a', 64<<20, `","items":[1]}`),
		"name":  newHugeBody(`{"type":"t","`, 'a', 64<<20, `":1,"items":[1]}`),
		"many":  newHugeBody(`{"type":"t","a":[`, ' ', 64<<20, `],"items":[1]}`),
	} {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/topics/jobs/groups", body)
			r.Header.Set("Content-Type", "application/json")
			_, _, err := openGroupBody(r, groupTestLimit)
			if err == nil || !strings.Contains(err.Error(), "over the limit of 1048576 bytes (--max-body-bytes)") {
				t.Errorf("error %.200v, want the fields over the limit", err)
			}
			if body.read > readsAtMost {
				t.Errorf("read %d bytes of the body for a %d-byte limit: not bounded while reading", body.read, groupTestLimit)
			}
		})
	}
}

// TestGroupJSONBoundMovesWithEachItem: items each under the limit, whose
// sum is far over it, all read: the bound is per item, not per body.
func TestGroupJSONBoundMovesWithEachItem(t *testing.T) {
	item := `"` + strings.Repeat("a", groupTestLimit-2) + `"`
	const n = 20
	body := `{"type":"t","items":[` + strings.TrimSuffix(strings.Repeat(item+",\n  ", n), ",\n  ") + `]}`
	r := httptest.NewRequest("POST", "/v1/topics/jobs/groups", strings.NewReader(body))
	items, _, err := openGroupBody(r, groupTestLimit)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		v, err := items.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("item %d: %v", got, err)
		}
		if len(v) != groupTestLimit {
			t.Fatalf("item %d: %d bytes, want %d", got, len(v), groupTestLimit)
		}
		got++
	}
	if got != n {
		t.Fatalf("%d items, want %d", got, n)
	}
}

// TestGroupNDJSONLineIsBoundedWhileRead: the NDJSON form's lines, the
// fields' and each item's, are bounded the same way (they were before
// issue 31 too; this keeps them so).
func TestGroupNDJSONLineIsBoundedWhileRead(t *testing.T) {
	for name, c := range map[string]struct {
		body   *hugeBody
		fields bool
	}{
		"fields": {newHugeBody(`{"type":"`, 'a', 64<<20, "\"}\n1\n"), true},
		"item":   {newHugeBody("{\"type\":\"t\"}\n\"", 'a', 64<<20, "\"\n"), false},
	} {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/topics/jobs/groups", c.body)
			r.Header.Set("Content-Type", "application/x-ndjson")
			items, _, err := openGroupBody(r, groupTestLimit)
			if !c.fields {
				if err != nil {
					t.Fatal(err)
				}
				_, err = items.next()
			}
			if err == nil || !strings.Contains(err.Error(), "over the limit of 1048576 bytes") {
				t.Errorf("error %.200v, want the line over the limit", err)
			}
			if c.body.read > readsAtMost {
				t.Errorf("read %d bytes of the body for a %d-byte limit: not bounded while reading", c.body.read, groupTestLimit)
			}
		})
	}
}
