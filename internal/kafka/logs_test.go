package kafka

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestRouteLogsSendsSaramasLinesToTheLog: sarama's own lines reach the
// part's log at debug, marked from=sarama, one record each.
func TestRouteLogsSendsSaramasLinesToTheLog(t *testing.T) {
	var buf testenv.LogBuffer
	RouteLogs(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer RouteLogs(slog.New(slog.DiscardHandler))
	sarama.Logger.Printf("producer/broker/%d state change to [retrying] on %s/%d because %v\n", 3, "jobs", 0, sarama.ErrNotEnoughReplicas)
	sarama.Logger.Println("client/metadata fetching metadata for [jobs]")
	got := buf.String() // other tests' producers may log here too
	if !strings.Contains(got, `level=DEBUG msg="producer/broker/3 state change to [retrying] on jobs/0 because kafka server: Messages are rejected since there are fewer in-sync replicas than required" from=sarama`) ||
		!strings.Contains(got, `level=DEBUG msg="client/metadata fetching metadata for [jobs]" from=sarama`) {
		t.Fatalf("sarama's lines in the log:\n%s", got)
	}
}
