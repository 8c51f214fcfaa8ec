// Package coordinator will be sluice's Consul-elected coordinator: per
// partition queue-depth scaling (PWQD), the task-group watcher and the
// canary monitor. It is built by issue 6.
package coordinator
