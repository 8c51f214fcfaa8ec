package job

// HTTP headers sluice sets on the requests it sends to its users'
// endpoints: the worker's http handler, per job attempt, and the
// coordinator's callback, per bulk group. Receivers dedupe on them: each
// request may come more than once (at-least-once).
const (
	// HeaderJobID is the job's id (the worker's http handler).
	HeaderJobID = "Sluice-Job-Id"
	// HeaderJobType is the job's type (the worker's http handler).
	HeaderJobType = "Sluice-Job-Type"
	// HeaderAttempt counts the attempts from 1: the job's (the worker's
	// http handler) or the callback's (the coordinator).
	HeaderAttempt = "Sluice-Attempt"
	// HeaderGroup is the job's group (the worker's http handler; empty
	// without one) or the group whose callback this is (the coordinator).
	HeaderGroup = "Sluice-Group"
)
