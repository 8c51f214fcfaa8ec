package kafka

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/IBM/sarama"
)

// RouteLogs sends sarama's own log lines (retries, metadata refreshes,
// broker connections) into log at debug level, marked from=sarama: without
// it they go nowhere, and a stall inside the client leaves no trace. sarama
// has one logger for the process.
func RouteLogs(log *slog.Logger) {
	sarama.Logger = saramaLog{log.With("from", "sarama")}
}

type saramaLog struct{ log *slog.Logger }

func (l saramaLog) Print(v ...any) { l.log.Debug(strings.TrimSpace(fmt.Sprint(v...))) }
func (l saramaLog) Printf(format string, v ...any) {
	l.log.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
func (l saramaLog) Println(v ...any) { l.log.Debug(strings.TrimSpace(fmt.Sprintln(v...))) }
