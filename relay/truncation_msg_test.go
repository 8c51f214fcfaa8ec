package relay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheTruncationAlertQuotesTheLog: the alert an operator gets on a
// truncated log quotes the ERROR the relay logs, so that grepping the logs
// for the alert's words finds every watermark lowered, including those
// lowered on another watermark's proof, below the log's end (the old text,
// "the log ends before the watermark", was false for those).
func TestTheTruncationAlertQuotesTheLog(t *testing.T) {
	quote, _, _ := strings.Cut(truncationMsg, " (")
	if strings.Contains(truncationMsg, "ends before the watermark") {
		t.Fatalf("the message claims the log ends before every watermark it lowers: %q", truncationMsg)
	}
	b, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	// The rule's description is folded YAML: compare with white space folded.
	if !strings.Contains(strings.Join(strings.Fields(string(b)), " "), `"`+quote+`"`) {
		t.Fatalf("deploy/prometheus/alerts.yml does not quote the relay's log line %q", quote)
	}
}
