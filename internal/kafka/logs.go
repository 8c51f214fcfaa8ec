package kafka

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/IBM/sarama"
)

// saramaTo is where sarama's own log lines go: nowhere until RouteLogs.
var saramaTo atomic.Pointer[slog.Logger]

// sarama has one logger for the process, a variable its goroutines read:
// it is set here, before any runs, and RouteLogs changes only where the
// lines go (a part, or a test process running several, may route them
// while producers log).
func init() {
	saramaTo.Store(slog.New(slog.DiscardHandler))
	sarama.Logger = saramaLog{}
}

// RouteLogs sends sarama's own log lines (retries, metadata refreshes,
// broker connections) into log at debug level, marked from=sarama: without
// it they go nowhere, and a stall inside the client leaves no trace.
func RouteLogs(log *slog.Logger) { saramaTo.Store(log.With("from", "sarama")) }

type saramaLog struct{}

func (saramaLog) Print(v ...any) { saramaTo.Load().Debug(strings.TrimSpace(fmt.Sprint(v...))) }
func (saramaLog) Printf(format string, v ...any) {
	saramaTo.Load().Debug(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
func (saramaLog) Println(v ...any) { saramaTo.Load().Debug(strings.TrimSpace(fmt.Sprintln(v...))) }
