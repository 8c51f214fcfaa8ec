// Package wire is the JSON a server part answers and the Go client
// (package client) decodes, written once: a bulk group's status and a
// job's whereabouts. internal/groups computes a GroupStatus and
// internal/queue a JobView, the gate and the admin API answer them, and
// the client's GroupStatus, GroupCancelled and JobInfo are aliases of these
// types, so the two sides cannot drift.
//
// The package imports only the standard library: the client links it, and
// must not link Redis or Kafka.
package wire
