package kafka

// Headers the relay writes on the records it produces, and the admin API
// reads off the dead-letter topics: one definition for both parts.
const (
	// HeaderDLQReason says why a record went to <topic>.dlq.
	HeaderDLQReason = "sluice-dlq-reason"
	// HeaderSource is the topic/partition/offset the record was read at.
	HeaderSource = "sluice-source"
	// HeaderRequeues counts the times the relay produced the job again.
	// A record replayed from the DLQ goes without it: a fresh attempt.
	HeaderRequeues = "sluice-relay-requeues"
)
