package gate_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/gate"
)

// TestMeasureBulkGroupHugeBodyMemory measures what a 1 GiB bulk group
// (one item, then one unknown field before "items") costs the gate in
// resident memory: the process's peak RSS during the request above its RSS
// before, against 4x --max-batch-bytes (docs/security.md, "Limits and
// timeouts"). Heavy (it sends 2 GiB), so it runs only when asked:
//
//	SLUICE_MEASURE_BIG_BODY=1 go test ./gate -run TestMeasureBulkGroupHugeBodyMemory -count=1 -v
//
// A number above 1 is the size in MiB instead. Linux only
// (/proc/self/status, /proc/self/clear_refs).
func TestMeasureBulkGroupHugeBodyMemory(t *testing.T) {
	mib, _ := strconv.ParseInt(os.Getenv("SLUICE_MEASURE_BIG_BODY"), 10, 64)
	if mib < 1 {
		t.Skip("set SLUICE_MEASURE_BIG_BODY=1 to send two 1 GiB bodies and measure the gate's memory")
	}
	size := int64(1 << 30)
	if mib > 1 {
		size = mib << 20
	}
	cfg := gate.DefaultConfig()
	g := startGate(t, newKafka(t), nil)
	for _, c := range []struct{ name, prefix, suffix string }{
		{"one item", `{"type":"t","items":["`, `"]}`},
		{"one unknown field", `{"type":"t","junk":"`, `","items":[1]}`},
	} {
		runtime.GC()
		debug.FreeOSMemory()
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			t.Fatalf("resetting the peak RSS: %v", err)
		}
		before := procStatus(t, "VmRSS")
		body := &countingBody{r: io.MultiReader(strings.NewReader(c.prefix), io.LimitReader(fillByte('a'), size), strings.NewReader(c.suffix))}
		resp, err := http.Post(g.url+"/v1/topics/jobs/groups", "application/json", body)
		status, answer := 0, ""
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			status, answer = resp.StatusCode, strings.TrimSpace(string(b))
		}
		peak := procStatus(t, "VmHWM")
		rise := peak - before
		t.Logf("%s of %d MiB: %d %.100s (client err %v); sent %d MiB before the answer; RSS %d MiB before, peak %d MiB: rise %d MiB = %.2fx --max-batch-bytes (%d MiB)",
			c.name, size>>20, status, answer, err, body.n>>20, before>>20, peak>>20, rise>>20, float64(rise)/float64(cfg.MaxBatchBytes), cfg.MaxBatchBytes>>20)
		if status != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", c.name, status)
		}
		if rise >= 4*cfg.MaxBatchBytes {
			t.Errorf("%s: resident memory rose %d MiB, want under 4x --max-batch-bytes (%d MiB)", c.name, rise>>20, 4*cfg.MaxBatchBytes>>20)
		}
	}
}

type fillByte byte

func (f fillByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(f)
	}
	return len(p), nil
}

// countingBody counts what the client sent.
type countingBody struct {
	r io.Reader
	n int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// procStatus reads a "kB" line of /proc/self/status, in bytes.
func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if name, v, ok := strings.Cut(sc.Text(), ":"); ok && name == field {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal(fmt.Sprintf("%s not in /proc/self/status", field))
	return 0
}
