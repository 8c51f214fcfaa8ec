package chaos

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// execution is one call of a job's handler, as the ledger saw it.
type execution struct {
	JobID   string
	Op      string // the op's tag, from the payload ("" for periodic jobs)
	Key     string // the idempotency key, from the payload
	Type    string // the job's type, as the handler's path names it: ok (work), fail, kill, slow
	Attempt int
	Who     string // the worker incarnation: "worker1.2"
	OK      bool   // answered 2xx (the job succeeded)
	// Cancelled says the worker gave the call up (its request's context
	// ended) before the ledger answered: a slow job's handler cancelled.
	Cancelled bool
	At        time.Time // when the call arrived
	// Answered is when the ledger gave its answer: from then on the run
	// is over and only its worker's record of it (the idempotency key,
	// then the ack) is missing.
	Answered time.Time
}

// ledger is the handlers' receiver, outside Redis: the workers' http
// handlers POST each job here (type work: 200 after a short run, type
// fail: 500, type kill: the calling worker is killed with SIGKILL, type
// slow: 200 after slowRun), and it records every call by job id: the
// worker sends the job id and attempt as headers. The idempotency key is
// not among them, so jobs carry it in their payload, with their op's tag.
type ledger struct {
	url string

	mu           sync.Mutex
	execs        []execution
	running      map[string]int // calls in progress per worker incarnation
	keyedRunning map[string]int // of those, jobs with an idempotency key
	slowRunning  map[string]int // slow jobs in progress per worker incarnation
	held         chan struct{}  // while not nil, 2xx answers wait until it is closed
	alerts       []canaryAlert  // the canary monitor's webhook calls, in order
	// kill kills the worker incarnation who with SIGKILL (and starts it
	// again); set by the bed. A kill job's calls past killLimit are
	// answered 200 instead, so that a job that is never made dead stops
	// killing workers for the rest of the run (the fault reports it).
	kill      func(who string)
	killCalls map[string]int
}

// killLimit is how many calls of one kill job the ledger answers by
// killing the worker: its max_attempts (killAttempts) and one more, to
// see a job that was not made dead in time.
const killLimit = killAttempts + 1

// slowRun is how long a slow job's handler runs unless its worker gives
// the call up: past two leases, so that a worker cut off from Redis must
// cancel it before its lease ends.
const slowRun = 2*lease + time.Second

// canaryAlert is one call of the coordinators' canary webhook.
type canaryAlert struct {
	Status    string   `json:"status"` // firing or resolved
	Diagnosis []string `json:"diagnosis"`
	At        time.Time
}

// hold makes the ledger keep its 2xx answers until the returned release is
// called: the handlers' runs are over, their answers not yet given.
func (l *ledger) hold() (release func()) {
	ch := make(chan struct{})
	l.mu.Lock()
	l.held = ch
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.held = nil
		l.mu.Unlock()
		close(ch)
	}
}

// jobRun is how long a job of type work takes: long enough that a worker
// killed with SIGKILL has jobs mid-run.
const jobRun = 3 * time.Millisecond

func newLedger(t *testing.T) *ledger {
	l := &ledger{running: map[string]int{}, keyedRunning: map[string]int{}, slowRunning: map[string]int{}, killCalls: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/canary" {
			a := canaryAlert{At: arrived}
			json.Unmarshal(body, &a)
			l.mu.Lock()
			l.alerts = append(l.alerts, a)
			l.mu.Unlock()
			return
		}
		var p struct {
			Op  string `json:"op"`
			Key string `json:"key"`
		}
		json.Unmarshal(body, &p)
		kind, who, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		attempt, _ := strconv.Atoi(r.Header.Get("Sluice-Attempt"))
		e := execution{JobID: r.Header.Get("Sluice-Job-Id"), Op: p.Op, Key: p.Key, Type: kind, Attempt: attempt, Who: who, At: arrived}
		switch kind {
		case "fail":
			e.Answered = time.Now()
			l.record(e)
			http.Error(w, "always failing", http.StatusInternalServerError)
			return
		case "kill":
			l.mu.Lock()
			l.killCalls[e.JobID]++
			n, kill := l.killCalls[e.JobID], l.kill
			l.mu.Unlock()
			if n <= killLimit && kill != nil {
				kill(who) // returns once the worker is dead: nobody reads an answer
				e.Answered = time.Now()
				l.record(e)
				return
			}
		case "slow":
			l.mu.Lock()
			l.slowRunning[who]++
			l.mu.Unlock()
			select {
			case <-time.After(slowRun):
				e.OK = true
			case <-r.Context().Done():
				e.Cancelled = true
			}
			e.Answered = time.Now()
			l.record(e)
			l.mu.Lock()
			l.slowRunning[who]--
			l.mu.Unlock()
			if e.OK {
				w.Write([]byte(`{"ok":true}`))
			}
			return
		}
		l.mu.Lock()
		l.running[who]++
		if p.Key != "" {
			l.keyedRunning[who]++
		}
		l.mu.Unlock()
		time.Sleep(jobRun)
		l.mu.Lock()
		held := l.held
		l.mu.Unlock()
		if held != nil {
			<-held
		}
		// Recorded as it is answered, whether or not its worker is still
		// alive to read the answer: a kill mid-run is a run that happened.
		e.OK, e.Answered = true, time.Now()
		l.record(e)
		l.mu.Lock()
		l.running[who]--
		if p.Key != "" {
			l.keyedRunning[who]--
		}
		l.mu.Unlock()
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)
	l.url = srv.URL
	return l
}

func (l *ledger) record(e execution) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.execs = append(l.execs, e)
}

// snapshot copies the executions so far.
func (l *ledger) snapshot() []execution {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]execution(nil), l.execs...)
}

// since copies the executions from the n-th on (0: all), so a poll reads
// only what is new.
func (l *ledger) since(n int) []execution {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n >= len(l.execs) {
		return nil
	}
	return append([]execution(nil), l.execs[n:]...)
}

// busy says whether a worker incarnation has a job in its handler now.
func (l *ledger) busy(who string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running[who] > 0
}

// busyKeyed says whether a worker incarnation has a job with an
// idempotency key in its handler now (a periodic job has none).
func (l *ledger) busyKeyed(who string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keyedRunning[who] > 0
}

// slowBusy says whether a worker incarnation has a slow job in its
// handler now.
func (l *ledger) slowBusy(who string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slowRunning[who] > 0
}

// canaryAlerts copies the webhook calls so far.
func (l *ledger) canaryAlerts() []canaryAlert {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]canaryAlert(nil), l.alerts...)
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.execs)
}

// calls counts the calls of one job, whatever their answer.
func (l *ledger) calls(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.execs {
		if e.JobID == id {
			n++
		}
	}
	return n
}
