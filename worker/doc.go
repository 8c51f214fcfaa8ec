// Package worker will be sluice's consumer and worker pool and its public
// handler API: fair dequeue per Redis partition, leases, retries into the
// dead set, execution rate limits and resizing on the coordinator's
// commands. It is built by issue 4.
package worker
