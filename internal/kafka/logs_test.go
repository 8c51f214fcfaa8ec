package kafka

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/IBM/sarama"
)

// TestRouteLogsSendsSaramasLinesToTheLog: sarama's own lines reach the
// part's log at debug, marked from=sarama, one record each.
func TestRouteLogsSendsSaramasLinesToTheLog(t *testing.T) {
	old := sarama.Logger
	defer func() { sarama.Logger = old }()
	var buf bytes.Buffer
	RouteLogs(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	sarama.Logger.Printf("producer/broker/%d state change to [retrying] on %s/%d because %v\n", 3, "jobs", 0, sarama.ErrNotEnoughReplicas)
	sarama.Logger.Println("client/metadata fetching metadata for [jobs]")
	got := buf.String()
	if strings.Count(got, "\n") != 2 || strings.Count(got, "level=DEBUG") != 2 || strings.Count(got, "from=sarama") != 2 ||
		!strings.Contains(got, `msg="producer/broker/3 state change to [retrying] on jobs/0 because kafka server: Messages are rejected`) {
		t.Fatalf("sarama's lines in the log:\n%s", got)
	}
}
